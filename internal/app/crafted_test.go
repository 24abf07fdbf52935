// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/controller"
	gs "github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/gitsync"
	"github.com/trainops/trainops/internal/testenv"
)

// TestCraftedCommitsWriteNothingOutsideTheCheckout pushes trees built to
// write through a symlink (a symlink d, then d/x or a folder d, aiming at a
// folder outside the checkout), or with names Git refuses (slashes, a
// repeated name, .git), to the settings' repository and to two
// teams' GitSyncs, one acting as a ServiceAccount and one without, through
// `trainops run`: each revision is refused naming the entry, nothing
// appears in the folder aimed at or in the cache's clone configuration,
// nothing of the revision is applied, and the next good push is.
func TestCraftedCommitsWriteNothingOutsideTheCheckout(t *testing.T) {
	ctx := context.Background()
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	const home = "trainops-crafted"
	srv, repo, cfg := repoRunServer(t, "ml/crafted.git", home)
	cm := func(ns, name string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  pushed: \"true\"\n", name, ns)
	}
	repo.MustWrite(t, "cluster/good.yaml", cm(home+"-apps", "good"))
	repo.MustWrite(t, "cluster/ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+home+"-apps\n")
	first, err := repo.CommitAndPush("first")
	if err != nil {
		t.Fatal(err)
	}
	// Two teams' GitSyncs, one acting as a ServiceAccount allowed
	// ConfigMaps in its namespace, one confined without one; their
	// repositories on a server of their own, without credentials.
	teamSrv, err := gs.Start("", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(teamSrv.Stop)
	teams := []*craftedTeam{{ns: "team-crafted"}, {ns: "team-crafted-sa", sa: "deployer"}}
	for _, tm := range teams {
		tm.create(t, c, teamSrv, cm(tm.ns, "good"))
	}
	// Stopped after the GitSyncs are gone (cleanups run last first).
	t.Cleanup(running(t, cfg))
	inventory := inventoryOf(c, cfg)
	testenv.Eventually(t, 60*time.Second, func() error {
		inv, err := inventory()
		if err != nil || inv.LastAppliedRevision != "main@sha1:"+first {
			return fmt.Errorf("settings' sync not at the first revision: %v %v", inv, err)
		}
		return nil
	})
	for _, tm := range teams {
		tm.start(t, c, teamSrv)
	}
	configs := testenv.CloneConfigs(cfg.Sync.CacheDir)

	outside := t.TempDir()
	for i, tc := range []struct {
		name    string
		entries []gs.Entry
		entry   string
	}{
		{"symlink d then d/x", []gs.Entry{gs.Symlink("d", outside), gs.File("d/x", "pwned")}, `"d"`},
		{"symlink d then folder d", []gs.Entry{gs.Symlink("d", "../../../../../../../.."+outside), gs.Folder("d", gs.File("x", "pwned"))}, `"d"`},
		{"symlink d inside then d/x", []gs.Entry{gs.Symlink("d", "cluster"), gs.File("d/x.yaml", cm(home+"-apps", "through-symlink"))}, `"d/x.yaml"`},
		{"a name with slashes", []gs.Entry{gs.File("a/../../x.yaml", cm(home+"-apps", "through-symlink"))}, `"a/../../x.yaml"`},
		{"a repeated name", []gs.Entry{gs.File("z.yaml", "a: 1\n"), gs.File("z.yaml", "a: 2\n")}, `"z.yaml"`},
		{"a .git folder", []gs.Entry{gs.Folder(".GIT", gs.File("config", "[core]\n\tfsmonitor = touch "+outside+"/ran\n"))}, `".GIT"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			canary := fmt.Sprintf("canary-%d", i)
			settings := append([]gs.Entry{gs.Folder("cluster",
				gs.File("good.yaml", cm(home+"-apps", "good")), gs.File("ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+home+"-apps\n"),
				gs.File("canary.yaml", cm(home+"-apps", canary)))}, tc.entries...)
			if _, err := srv.CommitTree("ml/crafted.git", "main", tc.name, settings); err != nil {
				t.Fatal(err)
			}
			for _, tm := range teams {
				tree := append([]gs.Entry{gs.File("good.yaml", cm(tm.ns, "good")), gs.File("canary.yaml", cm(tm.ns, canary))}, tc.entries...)
				crafted, err := teamSrv.CommitTree(tm.ns+".git", "main", tc.name, tree)
				if err != nil {
					t.Fatal(err)
				}
				tm.ask(t, c, crafted)
			}
			want := "tree entry " + tc.entry
			testenv.Eventually(t, 60*time.Second, func() error {
				if inv, err := inventory(); err != nil || !strings.Contains(inv.LastError, want) {
					return fmt.Errorf("the settings' sync does not refuse the revision for %s: %v %v", want, inv.LastError, err)
				}
				return nil
			})
			for _, tm := range teams {
				testenv.Eventually(t, 60*time.Second, tm.at(c, "", want))
			}
			if got := testenv.FilesUnder(outside); len(got) != 0 {
				t.Fatalf("files appeared outside the checkout: %v", got)
			}
			if now := testenv.CloneConfigs(cfg.Sync.CacheDir); now != configs {
				t.Errorf("a clone's configuration changed:\n%s\nwas\n%s", now, configs)
			}
			keys := []client.ObjectKey{{Namespace: home + "-apps", Name: canary}, {Namespace: home + "-apps", Name: "through-symlink"}}
			for _, tm := range teams {
				keys = append(keys, client.ObjectKey{Namespace: tm.ns, Name: canary})
			}
			for _, key := range keys {
				if err := c.Get(ctx, key, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
					t.Errorf("ConfigMap %s of the refused revision: %v", key, err)
				}
			}
			// The next good push is applied by all.
			repo.MustWrite(t, "cluster/next.yaml", cm(home+"-apps", "next-"+canary))
			good, err := repo.AmendAndForcePush("good after " + tc.name)
			if err != nil {
				t.Fatal(err)
			}
			for _, tm := range teams {
				_ = tm.repo.Write("next.yaml", cm(tm.ns, "next-"+canary))
				rev, err := tm.repo.AmendAndForcePush("good after " + tc.name)
				if err != nil {
					t.Fatal(err)
				}
				tm.ask(t, c, rev)
				testenv.Eventually(t, 60*time.Second, tm.at(c, rev, ""))
			}
			testenv.Eventually(t, 60*time.Second, func() error {
				if inv, err := inventory(); err != nil || inv.LastAppliedRevision != "main@sha1:"+good {
					return fmt.Errorf("the settings' sync did not apply the good push: %v", err)
				}
				return nil
			})
		})
	}
}

// craftedTeam is one team of TestCraftedCommitsWriteNothingOutsideTheCheckout:
// its namespace, ServiceAccount (if any), repository <ns>.git and GitSync.
type craftedTeam struct {
	ns, sa string
	repo   *gs.Repo
	gs     *gitopsv1alpha1.GitSync
}

// create makes the team's namespace, ServiceAccount (allowed ConfigMaps
// there) and repository holding good.
func (tm *craftedTeam) create(t *testing.T, c client.Client, srv *gs.Server, good string) {
	t.Helper()
	ctx := context.Background()
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tm.ns}}}
	if tm.sa != "" {
		objs = append(objs, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: tm.sa}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: tm.sa}, Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: tm.sa},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: tm.sa},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: tm.ns, Name: tm.sa}}})
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	repo, err := srv.NewRepo(tm.ns+".git", "main", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(repo.Close)
	repo.MustWrite(t, "good.yaml", good)
	if _, err := repo.CommitAndPush("first"); err != nil {
		t.Fatal(err)
	}
	tm.repo = repo
}

// start creates the team's GitSync, deleted at the end of the test, and
// waits until it is ready.
func (tm *craftedTeam) start(t *testing.T, c client.Client, srv *gs.Server) {
	t.Helper()
	ctx := context.Background()
	tm.gs = &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: tm.ns, Name: "training"},
		Spec: gitopsv1alpha1.GitSyncSpec{Repository: gitopsv1alpha1.GitRepository{URL: srv.URL(tm.ns + ".git"), Branch: "main"},
			Interval: &metav1.Duration{Duration: 10 * time.Second}, Prune: true, ServiceAccountName: tm.sa}}
	if err := c.Create(ctx, tm.gs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Delete(ctx, tm.gs)
		testenv.Eventually(t, 60*time.Second, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(tm.gs), &gitopsv1alpha1.GitSync{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("GitSync %s still there: %v", tm.ns, err)
			}
			return nil
		})
	})
	testenv.Eventually(t, 60*time.Second, tm.at(c, "", ""))
}

// at checks that the team's GitSync applied rev (refused empty), or says
// refused.
func (tm *craftedTeam) at(c client.Client, rev, refused string) func() error {
	return func() error {
		g := &gitopsv1alpha1.GitSync{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(tm.gs), g); err != nil {
			return err
		}
		if refused == "" && (!conditions.IsReady(g) || !strings.HasSuffix(g.Status.LastAppliedRevision, rev)) {
			return fmt.Errorf("GitSync %s not ready at %s: %+v", tm.ns, rev, g.Status.Conditions)
		}
		if refused != "" && !strings.Contains(fmt.Sprint(g.Status.Conditions), refused) {
			return fmt.Errorf("GitSync %s does not say %q: %+v", tm.ns, refused, g.Status.Conditions)
		}
		return nil
	}
}

// ask asks the team's GitSync for a sync now, as a push to the webhook does.
func (tm *craftedTeam) ask(t *testing.T, c client.Client, token string) {
	t.Helper()
	g := &gitopsv1alpha1.GitSync{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(tm.gs), g); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(g.DeepCopy())
	g.Annotations = map[string]string{gitsync.AnnotationRequestedAt: token}
	if err := c.Patch(context.Background(), g, patch); err != nil {
		t.Fatal(err)
	}
}
