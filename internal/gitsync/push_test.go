// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

// TestGitSyncPushSharesOneFetch: two teams' GitSyncs follow folders of one
// repository, a third another repository, and a fourth, given to another
// shard, the first repository. One fetch serves the two teams; a push of
// the first repository syncs both with one more fetch, leaves the third
// unfetched and unsynced, and reaches the other shard's GitSync only
// through its requested-at annotation. A push through a follower asks
// through the annotation too, still with one fetch.
func TestGitSyncPushSharesOneFetch(t *testing.T) {
	home, teamA, teamB := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	sel, err := config.ShardSelector("")
	if err != nil {
		t.Fatal(err)
	}
	git, r := startGitSyncReconciler(t, home, func(s *GitSyncSettings) { s.Selector = sel })
	shared, err := git.NewRepo("shared.git", "main", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(shared.Close)
	push := func(version string) string {
		shared.MustWrite(t, "a/pyjob.yaml", benchrepo.PyJobYAML(teamA, "a-"+version))
		shared.MustWrite(t, "b/pyjob.yaml", benchrepo.PyJobYAML(teamB, "b-"+version))
		rev, err := shared.CommitAndPush(version)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	first := push("one")
	other := teamRepo(t, git, "other.git", teamB+"/o1")

	hour := &metav1.Duration{Duration: time.Hour}
	gitSync := func(ns, name, repo, path string, labels map[string]string) *gitopsv1alpha1.GitSync {
		return createGitSync(t, &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: gitopsv1alpha1.GitSyncSpec{Repository: gitopsv1alpha1.GitRepository{URL: git.URL(repo), Branch: "main", Path: path}, Interval: hour, Prune: true, PruneBudget: "100%"}})
	}
	gsA := gitSync(teamA, "training", "shared.git", "a", nil)
	gsB := gitSync(teamB, "training", "shared.git", "b", nil)
	gsO := gitSync(teamB, "other", "other.git", ".", nil)
	// Another shard's: its namespace is labelled for it by the platform.
	teamS := testenv.NewNamespace(t, k8s)
	testenv.Update(t, k8s, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: teamS}}, func(n *corev1.Namespace) {
		n.Labels = map[string]string{config.ShardLabel: "s2"}
	})
	gsS := gitSync(teamS, "sharded", "shared.git", "a", nil)
	for _, gs := range []*gitopsv1alpha1.GitSync{gsA, gsB} {
		waitGitSync(t, gs, "ready", ready(first))
	}
	o := waitGitSync(t, gsO, "ready", ready(""))
	clone := git.Fetches("other.git") // one GitSync's first fetch
	if n := git.Fetches("shared.git"); n != clone {
		t.Errorf("two GitSyncs of one repository asked it %d times; one clone asks %d", n, clone)
	}

	// A push of the shared repository, through the leader.
	second := push("two")
	if _, err := other.CommitEmptyAndPush("untouched"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n, err := r.Push(ctx, gitops.ParsePush(githubPayload(git, "shared.git", "main")), true)
	if err != nil || n != 3 {
		t.Fatalf("push asked %d GitSyncs (%v), want 3: two of this shard, one of another", n, err)
	}
	for _, gs := range []*gitopsv1alpha1.GitSync{gsA, gsB} {
		waitGitSync(t, gs, "ready", ready(second))
	}
	if n := git.Fetches("shared.git") - clone; n != 1 {
		t.Errorf("the push made %d fetches for two GitSyncs, want 1", n)
	}
	if !pyjobExists(t, teamA, "a-two") || !pyjobExists(t, teamB, "b-two") || pyjobExists(t, teamA, "a-one") {
		t.Error("the pushed revision was not applied in both teams' namespaces")
	}
	// Nothing reached the repository no push named, and nothing of the
	// other shard's GitSync was synced here.
	if n := git.Fetches("other.git"); n != clone {
		t.Errorf("the repository no push named was fetched %d more times", n-clone)
	}
	now := &gitopsv1alpha1.GitSync{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(gsO), now); err != nil {
		t.Fatal(err)
	}
	if now.Status.LastAttemptedRevision != o.Status.LastAttemptedRevision {
		t.Errorf("the GitSync of the repository no push named synced %s", now.Status.LastAttemptedRevision)
	}
	s := &gitopsv1alpha1.GitSync{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(gsS), s); err != nil {
		t.Fatal(err)
	}
	if s.Annotations[AnnotationRequestedAt] == "" {
		t.Error("the other shard's GitSync was not asked through its annotation")
	}
	if len(s.Status.Conditions) != 0 || len(s.Finalizers) != 0 || pyjobExistsIn(t, s) {
		t.Errorf("this shard synced another shard's GitSync: %+v", s.Status)
	}

	// Through a follower: the annotation, one fetch for both.
	third := push("three")
	before := git.Fetches("shared.git")
	if n, err := r.Push(ctx, gitops.ParsePush(githubPayload(git, "shared.git", "main")), false); err != nil || n != 3 {
		t.Fatalf("a follower's push asked %d GitSyncs (%v), want 3", n, err)
	}
	for _, gs := range []*gitopsv1alpha1.GitSync{gsA, gsB} {
		g := waitGitSync(t, gs, "ready", ready(third))
		if g.Status.LastHandledReconcileAt == "" || g.Status.LastHandledReconcileAt != g.Annotations[AnnotationRequestedAt] {
			t.Errorf("%s/%s: lastHandledReconcileAt %q, annotation %q", g.Namespace, g.Name, g.Status.LastHandledReconcileAt, g.Annotations[AnnotationRequestedAt])
		}
	}
	if n := git.Fetches("shared.git") - before; n != 1 {
		t.Errorf("a follower's push made %d fetches for two GitSyncs, want 1", n)
	}
}

// pyjobExistsIn reports whether anything gs's repository holds was applied
// in its namespace by it: a PyJob carrying its sync label.
func pyjobExistsIn(t *testing.T, gs *gitopsv1alpha1.GitSync) bool {
	t.Helper()
	list := &trainingv1alpha1.PyJobList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(gs.Namespace), client.MatchingLabels{gitops.LabelSync: GitSyncLabel(gs.Namespace, gs.Name)}); err != nil {
		t.Fatal(err)
	}
	return len(list.Items) > 0
}

// githubPayload is a push event as GitHub sends it for repo on git's
// server, branch ref.
func githubPayload(git *gitserver.Server, repo, ref string) []byte {
	url := git.URL(repo)
	return []byte(fmt.Sprintf(`{"ref":"refs/heads/%s","repository":{"clone_url":%q,"html_url":%q}}`, ref, url, strings.TrimSuffix(url, ".git")))
}

// TestGitSyncWebhookSecretIsItsOwn: a GitSync with a webhook secret of its
// own gets it read as its ServiceAccount, is not synced by pushes checked
// against the shared secret, and is asked for a sync by a push to its own
// path; outside trainops's namespace without a ServiceAccount it is
// refused.
func TestGitSyncWebhookSecretIsItsOwn(t *testing.T) {
	ctx := context.Background()
	home, team := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	git, r := startGitSyncReconciler(t, home, nil)
	sa := teamServiceAccount(t, team)
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "hook"}, Data: map[string][]byte{"token": []byte("team-own-token")}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "read-hook"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"hook"}, Verbs: []string{"get"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "read-hook"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-hook"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: team, Name: sa}}},
	} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	teamRepo(t, git, "own.git", team+"/p1")
	gs := &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "training"}, Spec: gitopsv1alpha1.GitSyncSpec{
		Repository: gitopsv1alpha1.GitRepository{URL: git.URL("own.git"), Branch: "main"}, Interval: &metav1.Duration{Duration: time.Hour},
		Prune: true, ServiceAccountName: sa, WebhookSecretRef: &gitopsv1alpha1.LocalObjectReference{Name: "hook"}}}
	createGitSync(t, gs)
	waitGitSync(t, gs, "ready", ready(""))
	if token, err := r.WebhookSecret(ctx, team, "training"); err != nil || string(token) != "team-own-token" {
		t.Fatalf("its webhook secret: %q, %v", token, err)
	}
	push := gitops.ParsePush(githubPayload(git, "own.git", "main"))
	if n, err := r.Push(ctx, push, false); err != nil || n != 0 {
		t.Fatalf("a push checked against the shared secret asked %d GitSyncs (%v), want none", n, err)
	}
	if err := r.PushGitSync(ctx, team, "training", push, false); err != nil {
		t.Fatal(err)
	}
	got := &gitopsv1alpha1.GitSync{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(gs), got); err != nil || got.Annotations[AnnotationRequestedAt] == "" {
		t.Fatalf("a push to its own path did not ask it for a sync: %v %v", got.Annotations, err)
	}

	bare := createGitSync(t, &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "bare"}, Spec: gitopsv1alpha1.GitSyncSpec{
		Repository: gitopsv1alpha1.GitRepository{URL: git.URL("own.git"), Branch: "main"}, Interval: &metav1.Duration{Duration: time.Hour},
		Prune: true, WebhookSecretRef: &gitopsv1alpha1.LocalObjectReference{Name: "hook"}}})
	waitGitSync(t, bare, "refused", func(g *gitopsv1alpha1.GitSync) bool {
		return conditions.GetReason(g, status.StalledCondition) == ReasonInvalidSpec &&
			strings.Contains(conditions.GetMessage(g, status.StalledCondition), "spec.webhookSecretRef")
	})
	if _, err := r.WebhookSecret(ctx, team, "bare"); err == nil {
		t.Error("the secret of a GitSync without a ServiceAccount outside trainops's namespace was read")
	}
}
