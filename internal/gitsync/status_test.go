// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

// kubectl runs the real kubectl against the test cluster.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	dir, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(dir, "kubectl"), append([]string{"--kubeconfig=" + env.Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// TestGitSyncStatusSurface: what a platform engineer reads with kubectl.
// `kubectl wait --for=condition=Ready` returns once a generation is
// applied; a bad revision asked for with `kubectl annotate` is Stalled,
// answering the annotation; a new generation synced onto the bad revision
// leaves observedGeneration at the last good one; the fix is Ready at the
// new generation; `kubectl get gitsyncs -A` shows READY, REVISION, AGE and
// the message.
func TestGitSyncStatusSurface(t *testing.T) {
	home, team := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	git := startGitSyncs(t, home, nil)
	repo := teamRepo(t, git, "surface.git", team+"/one")
	gs := newGitSync(t, git, home, "surface", "surface.git", "")
	if out, err := kubectl(t, "wait", "--for=condition=Ready", "gitsync/surface", "-n", home, "--timeout=60s"); err != nil {
		t.Fatalf("kubectl wait for Ready: %v\n%s", err, out)
	}
	g := waitGitSync(t, gs, "ready", ready(""))
	if g.Status.ObservedGeneration != 1 || !pyjobExists(t, team, "one") {
		t.Fatalf("after kubectl wait: observedGeneration %d, PyJob one applied %v", g.Status.ObservedGeneration, pyjobExists(t, team, "one"))
	}

	// A revision with an invalid PyJob, asked for now.
	if err := repo.Write("pyjobs/bad.yaml", strings.Replace(benchrepo.PyJobYAML(team, "bad"), "gpu: 2", "gpu: -1", 1)); err != nil {
		t.Fatal(err)
	}
	bad, err := repo.CommitAndPush("bad")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, "annotate", "gitsync/surface", "-n", home, AnnotationRequestedAt+"=now-1", "--overwrite"); err != nil {
		t.Fatalf("kubectl annotate: %v\n%s", err, out)
	}
	if out, err := kubectl(t, "wait", "--for=condition=Stalled", "gitsync/surface", "-n", home, "--timeout=60s"); err != nil {
		t.Fatalf("kubectl wait for Stalled: %v\n%s", err, out)
	}
	g = waitGitSync(t, gs, "stalled on the bad revision", func(x *gitopsv1alpha1.GitSync) bool {
		reason := conditions.GetReason(x, status.StalledCondition)
		return conditions.IsStalled(x) && strings.HasSuffix(x.Status.LastAttemptedRevision, bad) &&
			(reason == gitops.ReasonValidationFailed || reason == gitops.ReasonDryRunFailed) && strings.Contains(fmt.Sprint(x.Status.LastError), "spec.gpu")
	})
	if g.Status.LastHandledReconcileAt != "now-1" || conditions.IsReady(g) || pyjobExists(t, team, "bad") {
		t.Errorf("stalled: lastHandledReconcileAt %q, ready %v, bad PyJob applied %v", g.Status.LastHandledReconcileAt, conditions.IsReady(g), pyjobExists(t, team, "bad"))
	}

	// A new generation on the bad revision: not observed as synced.
	testenv.Update(t, k8s, &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "surface"}}, func(x *gitopsv1alpha1.GitSync) {
		x.Spec.Interval = &metav1.Duration{Duration: 2 * time.Hour}
	})
	g = waitGitSync(t, gs, "stalled at generation 2", func(x *gitopsv1alpha1.GitSync) bool {
		return x.Generation == 2 && conditions.IsStalled(x) && conditions.Get(x, status.StalledCondition).ObservedGeneration == 2
	})
	if g.Status.ObservedGeneration != 1 {
		t.Errorf("observedGeneration %d after generation 2 was refused, want 1", g.Status.ObservedGeneration)
	}

	// Fixed: Ready at generation 2.
	repo.MustRemove(t, "pyjobs/bad.yaml")
	good, err := repo.CommitAndPush("fixed")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, "annotate", "gitsync/surface", "-n", home, AnnotationRequestedAt+"=now-2", "--overwrite"); err != nil {
		t.Fatalf("kubectl annotate: %v\n%s", err, out)
	}
	g = waitGitSync(t, gs, "ready at the fix", ready(good))
	if g.Status.ObservedGeneration != 2 || g.Status.LastHandledReconcileAt != "now-2" || len(g.Status.LastError) != 0 {
		t.Errorf("fixed: observedGeneration %d, lastHandledReconcileAt %q, lastError %v", g.Status.ObservedGeneration, g.Status.LastHandledReconcileAt, g.Status.LastError)
	}
	out, err := kubectl(t, "get", "gitsyncs", "-A")
	if err != nil {
		t.Fatalf("kubectl get: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var row string
	for _, l := range lines {
		if strings.HasPrefix(l, home+" ") {
			row = l
		}
	}
	if fields := strings.Fields(lines[0]); len(fields) < 6 || strings.Join(fields[2:6], " ") != "READY REVISION AGE MESSAGE" ||
		!strings.Contains(row, "True") || !strings.Contains(row, good[:7]) || !strings.Contains(row, "applied revision") {
		t.Errorf("kubectl get gitsyncs -A:\n%s", out)
	}

	// With prune: false, deleting the GitSync leaves what it applied.
	testenv.Update(t, k8s, &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "surface"}}, func(x *gitopsv1alpha1.GitSync) { x.Spec.Prune = false })
	waitGitSync(t, gs, "ready at generation 3", func(x *gitopsv1alpha1.GitSync) bool { return x.Status.ObservedGeneration == 3 && conditions.IsReady(x) })
	if out, err := kubectl(t, "delete", "gitsync/surface", "-n", home, "--wait=true", "--timeout=60s"); err != nil {
		t.Fatalf("kubectl delete: %v\n%s", err, out)
	}
	if !pyjobExists(t, team, "one") {
		t.Error("deleting a GitSync with prune: false pruned what it applied")
	}
}
