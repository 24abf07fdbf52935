// SPDX-License-Identifier: Apache-2.0

package driverupgrade

import (
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// TestPodDeletionFiltersAreKubectlDrains: a GPU pod no controller manages
// is kept unless force, one with an emptyDir unless deleteEmptyDir; pods
// that use no GPU, a DaemonSet's and ended ones are never looked at.
func TestPodDeletionFiltersAreKubectlDrains(t *testing.T) {
	gpu := func(name string, owner string, emptyDir bool, phase corev1.PodPhase) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}},
			Status: corev1.PodStatus{Phase: phase}}
		if owner != "" {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: owner, Name: "o", UID: "u", Controller: ptr.To(true)}}
		}
		if emptyDir {
			p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}
		return p
	}
	cpuOnly := gpu("cpu", "", false, corev1.PodRunning)
	cpuOnly.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	pods := []corev1.Pod{
		gpu("bare", "", false, corev1.PodRunning),
		gpu("job", "Job", false, corev1.PodRunning),
		gpu("scratch", "Job", true, corev1.PodRunning),
		gpu("stack", "DaemonSet", false, corev1.PodRunning),
		gpu("ended", "", true, corev1.PodSucceeded),
		cpuOnly,
	}
	names := func(kept []string) []string {
		var out []string
		for _, k := range kept {
			out = append(out, strings.Fields(k)[0])
		}
		return out
	}
	for _, tc := range []struct {
		spec gpuv1alpha1.PodDeletionSpec
		want []string
	}{
		{gpuv1alpha1.PodDeletionSpec{}, []string{"ml/bare", "ml/scratch"}},
		{gpuv1alpha1.PodDeletionSpec{Force: true}, []string{"ml/scratch"}},
		{gpuv1alpha1.PodDeletionSpec{DeleteEmptyDir: true}, []string{"ml/bare"}},
		{gpuv1alpha1.PodDeletionSpec{Force: true, DeleteEmptyDir: true}, nil},
	} {
		kept := undeletable(pods, tc.spec)
		if got := names(kept); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: kept %q, want %v", tc.spec, kept, tc.want)
		}
		for _, k := range kept {
			if !strings.Contains(k, "podDeletion.") {
				t.Errorf("%q does not name the setting that evicts it", k)
			}
		}
	}
}

// TestValidatedNeedsANewReadyValidator: a node's new driver counts as
// validated only by a ready validator pod made since trainops restarted
// the node's driver (or any ready one when it restarted nothing).
func TestValidatedNeedsANewReadyValidator(t *testing.T) {
	restarted := metav1.NewTime(time.Date(2026, 1, 1, 12, 0, 0, 500_000_000, time.UTC))
	pod := func(created time.Time, ready bool) *corev1.Pod {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
	}
	for _, tc := range []struct {
		name      string
		validator *corev1.Pod
		restarted *metav1.Time
		want      bool
	}{
		{"no validator pod", nil, &restarted, false},
		{"not ready", pod(restarted.Add(time.Minute), false), &restarted, false},
		{"older than the restart", pod(restarted.Add(-time.Minute), true), &restarted, false},
		{"made in the restart's second", pod(restarted.Truncate(time.Second), true), &restarted, true},
		{"made since the restart", pod(restarted.Add(time.Minute), true), &restarted, true},
		{"nothing restarted", pod(restarted.Add(-time.Hour), true), nil, true},
	} {
		u := upgradeNode{validator: tc.validator, rec: upgradeRecord{Restarted: tc.restarted}}
		if got := u.validated(); got != tc.want {
			t.Errorf("%s: validated %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLongestInStateIsPerNode: the stuck-rollout figure is the time the
// slowest upgrading node has spent in its state, not how long some node
// has been upgrading: done, waiting and failed nodes do not count.
func TestLongestInStateIsPerNode(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(state string, ago time.Duration) upgradeNode {
		return upgradeNode{state: state, rec: upgradeRecord{Since: metav1.NewTime(now.Add(-ago))}}
	}
	views := []upgradeNode{at(UpgradeDone, 5*time.Hour), at(UpgradeRequired, 4*time.Hour), at(UpgradeFailed, 3*time.Hour),
		at(DrainRequired, 2*time.Minute), at(ValidationRequired, 7*time.Minute)}
	if got := longestInState(views, now); got != 7*time.Minute {
		t.Errorf("longest in state %s, want 7m", got)
	}
	if got := longestInState(views[:3], now); got != 0 {
		t.Errorf("with no node upgrading: %s, want 0", got)
	}
}

// TestRolloutWaitsForEveryDriverDaemonSet: no node starts while the
// ClusterPolicy's spec is not applied or a driver DaemonSet's controller
// has not seen its template; other DaemonSets do not hold it.
func TestRolloutWaitsForEveryDriverDaemonSet(t *testing.T) {
	cp := &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Generation: 3}, Status: gpuv1alpha1.ClusterPolicyStatus{ObservedGeneration: 3}}
	ds := func(name string, generation, observed int64) appsv1.DaemonSet {
		return appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-operator", Name: name, Generation: generation},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: observed}}
	}
	ubuntu, rhel := builder.DriverDaemonSet+"-ubuntu22.04", builder.DriverDaemonSet+"-rhel9.4"
	settled := []appsv1.DaemonSet{ds(ubuntu, 2, 2), ds(rhel, 2, 2), ds("nvidia-device-plugin-daemonset", 5, 4)}
	if got := unsettled(cp, settled); got != "" {
		t.Errorf("settled: waits for %q", got)
	}
	if got := unsettled(cp, []appsv1.DaemonSet{ds(ubuntu, 2, 2), ds(rhel, 3, 2)}); !strings.Contains(got, "generation 3 of gpu-operator/"+rhel) {
		t.Errorf("a driver DaemonSet not yet seen: waits for %q", got)
	}
	behind := cp.DeepCopy()
	behind.Generation = 4
	if got := unsettled(behind, settled); !strings.Contains(got, "ClusterPolicy's generation 4 is applied") {
		t.Errorf("a spec not yet applied: waits for %q", got)
	}
	nodes := []upgradeNode{{node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n0"}}, state: UpgradeRequired}}
	if _, _, msg := upgradeSummary(nodes, unsettled(behind, settled)); !strings.Contains(msg, "upgrading: n0 (upgrade-required); no node starts until the ClusterPolicy's generation 4 is applied") {
		t.Errorf("message %q", msg)
	}
}
