// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fluxcd/pkg/runtime/conditions"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/gitsync"
	"github.com/trainops/trainops/internal/signature"
	"github.com/trainops/trainops/internal/testenv"
)

// TestTwoShards runs the main Deployment's process and one shard's, both
// leader-elected: each syncs only the GitSyncs of its own namespaces (the
// main one those without sharding.trainops.dev/key, the shard those the
// platform labelled s2), each holds a lease of its own, and one push to
// the main process's webhook reaches the shard's GitSync too. A GitSync
// whose team labels it for the shard is not the shard's, and the shard,
// on default settings, enforces the main process's policy: a PyJob reading
// a Secret, which the main process refuses, is refused by the shard too.
func TestTwoShards(t *testing.T) {
	const home, team, sharded = "trainops-shard", "ml-shard", "ml-shard-s2"
	dir := t.TempDir()
	bin := testenv.BuildTrainops(t)
	srv, repo := gitRepo(t, "shards.git")
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for ns, labels := range map[string]map[string]string{home: nil, team: nil, sharded: {config.ShardLabel: "s2"}} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	pj := func(ns, name string) string { return strings.ReplaceAll(pyjobYAML(name), "ml-e2e", ns) }
	write := func(version string) string {
		repo.MustWrite(t, "main/pyjob.yaml", pj(team, "main-"+version))
		// Without a ServiceAccount, the shard's GitSync writes only into
		// its own namespace.
		repo.MustWrite(t, "s2/pyjob.yaml", pj(sharded, "s2-"+version))
		rev, err := repo.CommitAndPush(version)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	first := write("one")
	hour := &metav1.Duration{Duration: time.Hour}
	gitSync := func(ns, name string, labels map[string]string) *gitopsv1alpha1.GitSync {
		gs := &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: gitopsv1alpha1.GitSyncSpec{Repository: gitopsv1alpha1.GitRepository{URL: srv.URL("shards.git"), Branch: "main", Path: name},
				Interval: hour, Prune: true, PruneBudget: "100%"}}
		if err := c.Create(ctx, gs); err != nil {
			t.Fatal(err)
		}
		return gs
	}
	// The main GitSync's team labels it for the shard: that changes
	// nothing, its namespace is the main process's.
	mainGS := gitSync(home, "main", map[string]string{config.ShardLabel: "s2"})
	shardGS := gitSync(sharded, "s2", nil)
	get := func(gs *gitopsv1alpha1.GitSync) *gitopsv1alpha1.GitSync {
		out := &gitopsv1alpha1.GitSync{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(gs), out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	applied := func(gs *gitopsv1alpha1.GitSync, rev string) error {
		g := get(gs)
		if !conditions.IsReady(g) || !strings.HasSuffix(g.Status.LastAppliedRevision, rev) {
			return fmt.Errorf("GitSync %s: ready %v at %q, want %s", g.Name, conditions.IsReady(g), g.Status.LastAppliedRevision, rev)
		}
		return nil
	}

	secret := filepath.Join(dir, "hook")
	_ = os.WriteFile(secret, []byte(hookSecret), 0o600)
	hook := freeAddr(t)
	mainLog := filepath.Join(dir, "main.log")
	startTrainops(t, bin, mainLog, "--namespace="+home, "--leader-election", "--webhook-bind-address="+hook, "--webhook-secret-file="+secret, "--refuse-secret-refs",
		"--cache-dir="+filepath.Join(dir, "main-cache"), "--log-format=json")
	testenv.Eventually(t, 60*time.Second, func() error { return applied(mainGS, first) })
	// The main process left the shard's GitSync alone: no finalizer, no
	// status, nothing applied.
	if g := get(shardGS); len(g.Finalizers) != 0 || len(g.Status.Conditions) != 0 {
		t.Fatalf("the main process synced the shard's GitSync: finalizers %v, status %+v", g.Finalizers, g.Status)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: sharded, Name: "s2-one"}, &trainingv1alpha1.PyJob{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the shard's PyJob exists before the shard runs: %v", err)
	}

	shardLog := filepath.Join(dir, "s2.log")
	startTrainops(t, bin, shardLog, "--namespace="+home, "--leader-election", "--shard=s2",
		"--cache-dir="+filepath.Join(dir, "s2-cache"), "--log-format=json")
	// GitSyncs go before the processes that finalize them (cleanups run
	// last first).
	t.Cleanup(func() {
		for _, gs := range []*gitopsv1alpha1.GitSync{mainGS, shardGS} {
			_ = c.Delete(ctx, gs)
		}
		testenv.Eventually(t, 60*time.Second, func() error {
			for _, ns := range []string{home, sharded} {
				list := &gitopsv1alpha1.GitSyncList{}
				if err := c.List(ctx, list, client.InNamespace(ns)); err != nil || len(list.Items) > 0 {
					return fmt.Errorf("GitSyncs left in %s: %d (%v)", ns, len(list.Items), err)
				}
			}
			return nil
		})
	})
	testenv.Eventually(t, 60*time.Second, func() error { return applied(shardGS, first) })

	wantOwnLeaders(t, c, home, "s2")

	// One push, to the main process's webhook, syncs both.
	second := write("two")
	postPush(t, hook, srv.URL("shards.git"))
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := applied(mainGS, second); err != nil {
			return err
		}
		return applied(shardGS, second)
	})
	if g := get(shardGS); g.Status.LastHandledReconcileAt == "" {
		t.Error("the shard's GitSync was not reached through its requested-at annotation")
	}

	wantShardRefusesSecrets(t, c, repo, shardGS, pj(sharded, "s2-secret"))
}

// wantShardRefusesSecrets pushes a PyJob (pyjob, in the shard's folder)
// reading a Secret, asks the shard's GitSync gs for a sync, and fails
// unless it is refused and nothing of it applied: the main process, started
// with --refuse-secret-refs, published that policy, and the shard on its
// defaults enforces it.
func wantShardRefusesSecrets(t *testing.T, c client.Client, repo *gitserver.Repo, gs *gitopsv1alpha1.GitSync, pyjob string) {
	t.Helper()
	ctx := context.Background()
	repo.MustWrite(t, "s2/pyjob.yaml", pyjob+"  env:\n  - name: TOKEN\n    valueFrom:\n      secretKeyRef:\n        name: other-team-token\n        key: token\n")
	rev, err := repo.CommitAndPush("secret")
	if err != nil {
		t.Fatal(err)
	}
	g := &gitopsv1alpha1.GitSync{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(gs), g); err != nil {
		t.Fatal(err)
	}
	g.Annotations = map[string]string{gitsync.AnnotationRequestedAt: rev}
	if err := c.Update(ctx, g); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(gs), g); err != nil {
			return err
		}
		if !conditions.IsStalled(g) || !strings.Contains(fmt.Sprint(g.Status.LastError), "secretKeyRef") {
			return fmt.Errorf("the shard's GitSync is not refused for the Secret: %+v", g.Status.Conditions)
		}
		return nil
	})
	if err := c.Get(ctx, client.ObjectKey{Namespace: gs.Namespace, Name: "s2-secret"}, &trainingv1alpha1.PyJob{}); !apierrors.IsNotFound(err) {
		t.Errorf("the shard applied a PyJob reading a Secret: %v", err)
	}
}

// wantOwnLeaders fails unless the main process and the shard each hold a
// lease of their own in home, with different holders.
func wantOwnLeaders(t *testing.T, c client.Client, home, shard string) {
	t.Helper()
	holders := map[string]string{}
	for _, id := range []string{LeaderElectionID, config.LeaderElectionID(LeaderElectionID, shard)} {
		l := &coordinationv1.Lease{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: home, Name: id}, l); err != nil {
			t.Fatalf("lease %s: %v", id, err)
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			t.Fatalf("lease %s has no holder", id)
		}
		holders[id] = *l.Spec.HolderIdentity
	}
	if len(holders) != 2 || holders[LeaderElectionID] == holders[config.LeaderElectionID(LeaderElectionID, shard)] {
		t.Errorf("leases %v: want a leader of its own for each", holders)
	}
}

// postPush posts GitHub's push of branch main of the repository at url,
// signed with hookSecret, to the webhook at hook, and fails unless it is
// accepted.
func postPush(t *testing.T, hook, url string) {
	t.Helper()
	body := fmt.Sprintf(`{"ref":"refs/heads/main","repository":{"clone_url":%q}}`, url)
	req, err := http.NewRequest(http.MethodPost, "http://"+hook+"/hook", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(signature.HeaderGitHubEvent, "push")
	req.Header.Set(signature.HeaderGitHubSignature, signature.Sign([]byte(hookSecret), []byte(body)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Fatalf("webhook answered %s", resp.Status)
	}
}
