// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/crdschema"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/notify"
	"github.com/trainops/trainops/internal/scheme"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

// startGitSyncs runs a GitSync reconciler of its own for one test, with
// trainops's namespace home, and returns the Git server it reads.
func startGitSyncs(t *testing.T, home string, settings func(*GitSyncSettings)) *gitserver.Server {
	git, _ := startGitSyncReconciler(t, home, settings)
	return git
}

// startGitSyncReconciler is startGitSyncs, returning the reconciler too.
func startGitSyncReconciler(t *testing.T, home string, settings func(*GitSyncSettings)) (*gitserver.Server, *GitSyncReconciler) {
	t.Helper()
	return startGitSyncReconcilerAs(t, env.Config, k8s, home, settings)
}

// startGitSyncReconcilerAs is startGitSyncReconciler acting as the user of
// cfg, whose client live is.
func startGitSyncReconcilerAs(t *testing.T, cfg *rest.Config, live client.Client, home string, settings func(*GitSyncSettings)) (*gitserver.Server, *GitSyncReconciler) {
	t.Helper()
	git, err := gitserver.Start("", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(git.Stop)
	// PyJobs are not reconciled here: the manager caches none.
	none, _ := labels.Parse(isolatedLabel + "=gitsync-test-none")
	m, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme.New(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// One reconciler per test, each named gitsync.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		Cache:      cache.Options{ByObject: map[client.Object]cache.ByObject{&trainingv1alpha1.PyJob{}: {Label: none}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := GitSyncSettings{Home: home, CacheDir: filepath.Join(t.TempDir(), "git"), AllowedKinds: check.DefaultAllowedKinds, Concurrency: 4, MaxConcurrent: 2}
	if settings != nil {
		settings(&s)
	}
	r := &GitSyncReconciler{Client: m.GetClient(), Live: live, RestConfig: cfg, HTTPClient: m.GetHTTPClient(), Mapper: m.GetRESTMapper(),
		Schemas: crdschema.Load, Recorder: m.GetEventRecorder("trainops-gitsync"), Settings: s,
		Pool: &gitsource.Pool{CacheDir: filepath.Join(s.CacheDir, "pool")}, Notifier: &notify.Notifier{Log: logr.Discard()}}
	if err := r.SetupWithManager(m); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(r.Notifier); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return git, r
}

// teamRepo makes a repository holding PyJobs, each named by "namespace/name".
func teamRepo(t *testing.T, git *gitserver.Server, name string, pyjobs ...string) *gitserver.Repo {
	t.Helper()
	repo, err := git.NewRepo(name, "main", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(repo.Close)
	if len(pyjobs) > 0 {
		writePyJobs(t, repo, pyjobs...)
	}
	return repo
}

// writePyJobs replaces the repository's PyJobs and pushes them.
func writePyJobs(t *testing.T, repo *gitserver.Repo, pyjobs ...string) string {
	t.Helper()
	if err := repo.Remove("pyjobs"); err != nil {
		t.Fatal(err)
	}
	for _, p := range pyjobs {
		ns, name, _ := strings.Cut(p, "/")
		if err := repo.Write(filepath.Join("pyjobs", ns+"-"+name+".yaml"), benchrepo.PyJobYAML(ns, name)); err != nil {
			t.Fatal(err)
		}
	}
	rev, err := repo.CommitAndPush(fmt.Sprint(pyjobs))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// teamServiceAccount makes a ServiceAccount in ns allowed to write PyJobs
// there and nothing else.
func teamServiceAccount(t *testing.T, ns string) string {
	t.Helper()
	return serviceAccountFor(t, ns, "deployer", rbacv1.PolicyRule{APIGroups: []string{trainingv1alpha1.GroupVersion.Group}, Resources: []string{"pyjobs"}})
}

// serviceAccountFor makes ServiceAccount name in ns, allowed every verb on
// the resources of rule there and nothing else.
func serviceAccountFor(t *testing.T, ns, name string, rule rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	rule.Verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: []rbacv1.PolicyRule{rule}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}},
	} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return name
}

// newGitSync creates a GitSync of repo in ns.
func newGitSync(t *testing.T, git *gitserver.Server, ns, name, repo, sa string) *gitopsv1alpha1.GitSync {
	t.Helper()
	return createGitSync(t, newGitSyncSpec(git, ns, name, repo, sa))
}

// newGitSyncSpec is newGitSync's GitSync, not yet created.
func newGitSyncSpec(git *gitserver.Server, ns, name, repo, sa string) *gitopsv1alpha1.GitSync {
	return &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: gitopsv1alpha1.GitSyncSpec{
		Repository:         gitopsv1alpha1.GitRepository{URL: git.URL(repo), Branch: "main"},
		Interval:           &metav1.Duration{Duration: time.Hour},
		Prune:              true,
		ServiceAccountName: sa,
	}}
}

// createGitSync creates gs, and deletes it when the test ends.
func createGitSync(t *testing.T, gs *gitopsv1alpha1.GitSync) *gitopsv1alpha1.GitSync {
	t.Helper()
	if err := k8s.Create(context.Background(), gs); err != nil {
		t.Fatal(err)
	}
	// Gone before the test's reconciler stops (cleanups run last first),
	// so no later test's reconciler finds it.
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), gs)
		testenv.Eventually(t, 60*time.Second, func() error {
			if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(gs), &gitopsv1alpha1.GitSync{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("GitSync %s/%s still there: %v", gs.Namespace, gs.Name, err)
			}
			return nil
		})
	})
	return gs
}

// waitGitSync waits until gs's status for its generation passes ok, and
// returns it.
func waitGitSync(t *testing.T, gs *gitopsv1alpha1.GitSync, what string, ok func(*gitopsv1alpha1.GitSync) bool) *gitopsv1alpha1.GitSync {
	t.Helper()
	got := &gitopsv1alpha1.GitSync{}
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(gs), got); err != nil {
			return err
		}
		if !ok(got) {
			return fmt.Errorf("GitSync %s/%s is not %s: %+v", gs.Namespace, gs.Name, what, got.Status)
		}
		return nil
	})
	return got
}

// ready is kstatus's Current: Ready for the latest generation, nothing in
// progress.
func ready(rev string) func(*gitopsv1alpha1.GitSync) bool {
	return func(gs *gitopsv1alpha1.GitSync) bool {
		return conditions.IsReady(gs) && gs.Status.ObservedGeneration == gs.Generation && strings.HasSuffix(gs.Status.LastAppliedRevision, rev)
	}
}

// stalledOn is a GitSync that refused revision rev for reason.
func stalledOn(rev, reason string) func(*gitopsv1alpha1.GitSync) bool {
	return func(gs *gitopsv1alpha1.GitSync) bool {
		return conditions.IsStalled(gs) && conditions.GetReason(gs, status.StalledCondition) == reason && strings.HasSuffix(gs.Status.LastAttemptedRevision, rev)
	}
}

func pyjobExists(t *testing.T, ns, name string) bool {
	t.Helper()
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &trainingv1alpha1.PyJob{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestGitSyncConfinement: two teams' GitSyncs, each acting as a
// ServiceAccount allowed only its own namespace. A revision of team A's
// repository that names an object in team B's namespace is refused whole
// (the API server's Forbidden, in A's status): nothing of it is applied,
// what A applied before stays. Each prunes only its own, a second GitSync
// claiming A's object is refused, and both statuses say so until it lets
// go; deleting a GitSync prunes what it applied.
func TestGitSyncConfinement(t *testing.T) {
	home, teamA, teamB := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	git := startGitSyncs(t, home, nil)
	saA, saB := teamServiceAccount(t, teamA), teamServiceAccount(t, teamB)

	repoA := teamRepo(t, git, "team-a.git", teamA+"/a1", teamA+"/a2")
	teamRepo(t, git, "team-b.git", teamB+"/b1")
	gsA := newGitSync(t, git, teamA, "training", "team-a.git", saA)
	gsB := newGitSync(t, git, teamB, "training", "team-b.git", saB)
	a := waitGitSync(t, gsA, "ready", ready(""))
	waitGitSync(t, gsB, "ready", ready(""))
	for _, p := range []string{teamA + "/a1", teamA + "/a2", teamB + "/b1"} {
		ns, name, _ := strings.Cut(p, "/")
		if !pyjobExists(t, ns, name) {
			t.Fatalf("PyJob %s was not applied", p)
		}
	}
	if len(a.Status.Inventory) != 1 || a.Status.Inventory[0] != (gitopsv1alpha1.KindCount{Kind: "PyJob", Count: 2}) {
		t.Errorf("team A's inventory counts %+v, want 2 PyJobs", a.Status.Inventory)
	}

	// Team A's repository reaches into team B's namespace, drops a2 and
	// adds a3: refused whole, as the API server forbids A's ServiceAccount.
	bad := writePyJobs(t, repoA, teamA+"/a1", teamA+"/a3", teamB+"/intruder")
	annotate(t, gsA, bad)
	a = waitGitSync(t, gsA, "stalled on the intrusion", stalledOn(bad, gitops.ReasonForbidden))
	if msg := fmt.Sprint(a.Status.LastError); !strings.Contains(msg, "forbidden") || !strings.Contains(msg, "intruder") {
		t.Errorf("team A's lastError does not name the forbidden object: %s", msg)
	}
	if pyjobExists(t, teamB, "intruder") || pyjobExists(t, teamA, "a3") || !pyjobExists(t, teamA, "a2") {
		t.Error("something of the refused revision was applied or pruned")
	}

	// A second GitSync claiming a1 is refused; a1 stays A's.
	teamRepo(t, git, "team-a-other.git", teamA+"/a1")
	gsC := newGitSync(t, git, teamA, "other", "team-a-other.git", saA)
	c := waitGitSync(t, gsC, "stalled on the takeover", stalledOn("", gitops.ReasonTakeoverRefused))
	if !strings.Contains(fmt.Sprint(c.Status.LastError), "a1") {
		t.Errorf("the second GitSync's lastError does not name a1: %+v", c.Status.LastError)
	}
	pj := &trainingv1alpha1.PyJob{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: teamA, Name: "a1"}, pj); err != nil {
		t.Fatal(err)
	}
	if got := pj.Labels[gitops.LabelSync]; got != GitSyncLabel(teamA, "training") {
		t.Errorf("a1's sync label %q, want team A's %q", got, GitSyncLabel(teamA, "training"))
	}
	if msg := fmt.Sprint(c.Status.LastError); !strings.Contains(msg, "belongs to GitSync "+teamA+"/training") {
		t.Errorf("the second GitSync's lastError does not name the GitSync a1 belongs to: %s", msg)
	}
	// Both statuses say so: A lists a1 as contested by the second.
	contested := []gitopsv1alpha1.ContestedObject{{Object: "PyJob " + teamA + "/a1", ClaimedBy: teamA + "/other"}}
	waitGitSync(t, gsA, "contested", func(g *gitopsv1alpha1.GitSync) bool {
		return equality.Semantic.DeepEqual(g.Status.Contested, contested)
	})
	// The second lets go (deleted): A's status no longer lists a1.
	if err := k8s.Delete(context.Background(), gsC); err != nil {
		t.Fatal(err)
	}
	waitGitSync(t, gsA, "no longer contested", func(g *gitopsv1alpha1.GitSync) bool { return len(g.Status.Contested) == 0 })

	// Fixed: A prunes a2 (its own), not B's b1.
	good := writePyJobs(t, repoA, teamA+"/a1")
	annotate(t, gsA, good)
	waitGitSync(t, gsA, "ready", ready(good))
	if pyjobExists(t, teamA, "a2") || !pyjobExists(t, teamB, "b1") {
		t.Error("team A's sync pruned the wrong objects")
	}

	// Deleting B's GitSync prunes b1 and only b1.
	if err := k8s.Delete(context.Background(), gsB); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if pyjobExists(t, teamB, "b1") {
			return fmt.Errorf("b1 not pruned")
		}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(gsB), &gitopsv1alpha1.GitSync{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("GitSync still there: %v", err)
		}
		return nil
	})
	if !pyjobExists(t, teamA, "a1") {
		t.Error("deleting team B's GitSync deleted team A's PyJob")
	}
}

// annotate asks gs for a sync now, as `kubectl annotate` with the
// requested-at annotation does, and waits until it was answered.
func annotate(t *testing.T, gs *gitopsv1alpha1.GitSync, token string) {
	t.Helper()
	testenv.Update(t, k8s, &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: gs.Namespace, Name: gs.Name}}, func(g *gitopsv1alpha1.GitSync) {
		if g.Annotations == nil {
			g.Annotations = map[string]string{}
		}
		g.Annotations[AnnotationRequestedAt] = token
	})
	waitGitSync(t, gs, "answering "+token, func(g *gitopsv1alpha1.GitSync) bool { return g.Status.LastHandledReconcileAt == token })
}

// TestGitSyncWithoutServiceAccount: a GitSync outside trainops's namespace
// that names no ServiceAccount writes only into its own namespace.
func TestGitSyncWithoutServiceAccount(t *testing.T) {
	home, team, other := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	git := startGitSyncs(t, home, nil)
	repo := teamRepo(t, git, "team.git", team+"/mine", other+"/theirs")
	gs := newGitSync(t, git, team, "training", "team.git", "")
	g := waitGitSync(t, gs, "refused", stalledOn("", gitops.ReasonValidationFailed))
	if msg := fmt.Sprint(g.Status.LastError); !strings.Contains(msg, other) {
		t.Errorf("lastError does not name the other namespace: %s", msg)
	}
	if pyjobExists(t, team, "mine") || pyjobExists(t, other, "theirs") {
		t.Error("something of the refused revision was applied")
	}
	rev := writePyJobs(t, repo, team+"/mine")
	annotate(t, gs, rev)
	waitGitSync(t, gs, "ready", ready(rev))
	if !pyjobExists(t, team, "mine") {
		t.Error("the GitSync's own PyJob was not applied")
	}
}

// TestGitSyncRequireServiceAccount: with requireServiceAccount, a GitSync
// outside trainops's namespace that names no ServiceAccount is Stalled and
// applies nothing.
func TestGitSyncRequireServiceAccount(t *testing.T) {
	home, strict := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	git := startGitSyncs(t, home, func(s *GitSyncSettings) { s.RequireServiceAccount = true })
	teamRepo(t, git, "strict.git", strict+"/x")
	gs2 := newGitSync(t, git, strict, "training", "strict.git", "")
	g2 := waitGitSync(t, gs2, "stalled", func(g *gitopsv1alpha1.GitSync) bool {
		return conditions.IsStalled(g) && conditions.GetReason(g, status.StalledCondition) == ReasonInvalidSpec
	})
	if !strings.Contains(conditions.GetMessage(g2, status.StalledCondition), "serviceAccountName is required") {
		t.Errorf("stalled message %q does not say a serviceAccountName is required", conditions.GetMessage(g2, status.StalledCondition))
	}
	if pyjobExists(t, strict, "x") {
		t.Error("a GitSync refused for its missing ServiceAccount applied something")
	}
}
