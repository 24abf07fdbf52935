// SPDX-License-Identifier: Apache-2.0

package capacity

import (
	"fmt"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
)

func object(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// clusterQueue is a ClusterQueue of one flavor with quota GPUs, used of
// them in use, in cohort (none when empty).
func clusterQueue(t *testing.T, name, cohort string, quota, used int, extra string) *unstructured.Unstructured {
	return object(t, fmt.Sprintf(`
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %s}
spec:
  cohortName: %q
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {name: cpu, nominalQuota: "1k"}
      - {name: nvidia.com/gpu, nominalQuota: %d%s}
status:
  pendingWorkloads: 3
  flavorsReservation:
  - name: a100
    resources:
    - {name: nvidia.com/gpu, total: "%d"}
`, name, cohort, quota, extra, used))
}

func localQueue(t *testing.T, ns, name, cq string) *unstructured.Unstructured {
	return object(t, fmt.Sprintf("apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: %s, namespace: %s}\nspec: {clusterQueue: %s}\n", name, ns, cq))
}

// job is the Job of PyJob name: workers pods of gpus each, on queue.
func job(name, queue string, workers int32, gpus int64, res string) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name + "-job", Labels: map[string]string{},
		OwnerReferences: []metav1.OwnerReference{{Kind: "PyJob", Name: name}}}}
	if queue != "" {
		j.Labels[QueueLabel] = queue
	}
	j.Spec.Parallelism = &workers
	j.Spec.Template.Spec.Containers = []corev1.Container{{Name: "trainer", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(gpus, resource.DecimalSI)},
	}}}
	return j
}

func gpuNode(name string, gpus int64, labels map[string]string) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Status: corev1.NodeStatus{
		Allocatable: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)},
	}}
}

func verdicts(t *testing.T, p *Plan) map[string]Verdict {
	t.Helper()
	out := map[string]Verdict{}
	for _, v := range p.Jobs {
		out[v.PyJob] = v
	}
	return out
}

func expect(t *testing.T, got map[string]Verdict, pyjob, result string, why ...string) {
	t.Helper()
	v, ok := got["team-a/"+pyjob]
	if !ok {
		t.Fatalf("no verdict for %s", pyjob)
	}
	if v.Result != result {
		t.Errorf("%s: %s (%s), want %s", pyjob, v.Result, v.Why, result)
	}
	for _, w := range why {
		if !strings.Contains(v.Why, w) {
			t.Errorf("%s: %q does not say %q", pyjob, v.Why, w)
		}
	}
}

// TestPlanAdmitsWaitsAndRefuses: in order, a Job that fits what is free
// is admitted and takes it; the next waits; one asking more than the
// quota, or a worker more than a node, never fits; a Job with no queue, or
// a queue that does not exist, is said so.
func TestPlanAdmitsWaitsAndRefuses(t *testing.T) {
	in := Inputs{
		ClusterQueues: []*unstructured.Unstructured{clusterQueue(t, "research", "", 16, 8, "")},
		LocalQueues:   []*unstructured.Unstructured{localQueue(t, "team-a", "team", "research")},
		Nodes:         []corev1.Node{gpuNode("n1", 8, nil), gpuNode("n2", 4, nil)},
	}
	p, err := New(in, []*batchv1.Job{
		job("first", "team", 2, 4, "nvidia.com/gpu"),
		job("second", "team", 1, 4, "nvidia.com/gpu"),
		job("huge", "team", 3, 8, "nvidia.com/gpu"),
		job("wide", "team", 1, 16, "nvidia.com/gpu"),
		job("free", "", 1, 2, "nvidia.com/gpu"),
		job("lost", "nope", 1, 1, "nvidia.com/gpu"),
	})
	if err != nil {
		t.Fatal(err)
	}
	got := verdicts(t, p)
	expect(t, got, "first", Admitted, "8 of 16")
	expect(t, got, "second", Waits, "asks 4", "0 free", "3 workloads pending")
	expect(t, got, "huge", NeverFits, "asks 24", "3 workers × 8", "(16)")
	expect(t, got, "wide", NeverFits, "asks 16", "largest node offers 8")
	expect(t, got, "free", Unqueued)
	expect(t, got, "lost", NeverFits, "LocalQueue team-a/nope does not exist")
	if n := len(p.NeverFit()); n != 3 {
		t.Errorf("%d never fit, want 3", n)
	}
	if f := p.ClusterQueues[0].Flavor[0]; f.InUse != 8 || f.Planned != 8 || f.Quota != 16 {
		t.Errorf("flavor after the plan: %+v", f)
	}
}

// TestPlanBorrowsFromTheCohort: a ClusterQueue out of quota borrows its
// cohort's unused quota up to its borrowingLimit, and never more.
func TestPlanBorrowsFromTheCohort(t *testing.T) {
	in := Inputs{
		ClusterQueues: []*unstructured.Unstructured{
			clusterQueue(t, "research", "lab", 8, 8, ", borrowingLimit: 4"),
			clusterQueue(t, "prod", "lab", 16, 8, ""),
		},
		LocalQueues: []*unstructured.Unstructured{localQueue(t, "team-a", "team", "research")},
	}
	p, err := New(in, []*batchv1.Job{
		job("borrows", "team", 1, 4, "nvidia.com/gpu"),
		job("past-limit", "team", 1, 4, "nvidia.com/gpu"),
		job("beyond", "team", 1, 13, "nvidia.com/gpu"),
	})
	if err != nil {
		t.Fatal(err)
	}
	got := verdicts(t, p)
	expect(t, got, "borrows", Admitted, "borrowing 4 from cohort lab")
	expect(t, got, "past-limit", Waits)
	expect(t, got, "beyond", NeverFits, "(12)")
}

// TestNodesOfferWhatTheDevicePluginAdvertises: under the change's
// ClusterPolicy a node offers replicas × its physical GPUs, renamed
// .shared when renameByDefault (and then nothing under nvidia.com/gpu);
// failRequestsGreaterThanOne refuses a worker asking 2 shared GPUs.
func TestNodesOfferWhatTheDevicePluginAdvertises(t *testing.T) {
	policy := func(replicas int32, rename, fail bool) *gpuv1alpha1.ClusterPolicySpec {
		return &gpuv1alpha1.ClusterPolicySpec{DevicePlugin: gpuv1alpha1.DevicePluginSpec{Config: &gpuv1alpha1.DevicePluginConfig{
			Sharing: &gpuv1alpha1.SharingSpec{TimeSlicing: &gpuv1alpha1.TimeSlicingSpec{
				RenameByDefault: rename, FailRequestsGreaterThanOne: fail,
				Resources: []gpuv1alpha1.TimeSlicingResource{{Name: "nvidia.com/gpu", Replicas: replicas}},
			}},
		}}}
	}
	// Advertised 16 now as 2 replicas of 8 GPUs (GFD's labels say so).
	nodes := []corev1.Node{gpuNode("n1", 16, map[string]string{"nvidia.com/gpu.replicas": "2"})}
	if got := nodeOffer(nodes, nil)["nvidia.com/gpu"]; got != 16 {
		t.Errorf("as it is: %d, want 16", got)
	}
	if got := nodeOffer(nodes, policy(4, false, false))["nvidia.com/gpu"]; got != 32 {
		t.Errorf("4 replicas of 8 GPUs: %d, want 32", got)
	}
	if got := nodeOffer(nodes, &gpuv1alpha1.ClusterPolicySpec{})["nvidia.com/gpu"]; got != 8 {
		t.Errorf("no sharing: %d, want the 8 physical", got)
	}
	renamed := nodeOffer(nodes, policy(4, true, false))
	if renamed["nvidia.com/gpu.shared"] != 32 || renamed["nvidia.com/gpu"] != 0 {
		t.Errorf("renamed: %v", renamed)
	}
	p, err := New(Inputs{Nodes: nodes, Policy: policy(4, true, true)}, []*batchv1.Job{
		job("plain", "", 1, 1, "nvidia.com/gpu"),
		job("two-shares", "", 1, 2, "nvidia.com/gpu.shared"),
		job("one-share", "", 1, 1, "nvidia.com/gpu.shared"),
	})
	if err != nil {
		t.Fatal(err)
	}
	got := verdicts(t, p)
	expect(t, got, "plain", NeverFits, "no node offers any")
	expect(t, got, "two-shares", NeverFits, "failRequestsGreaterThanOne")
	expect(t, got, "one-share", Unqueued)
}

// TestNoKueueMakesTheQueueInert: in a cluster without Kueue a queued Job
// is planned as one without a queue, never as one whose queue is missing.
func TestNoKueueMakesTheQueueInert(t *testing.T) {
	p, err := New(Inputs{NoKueue: true, Nodes: []corev1.Node{gpuNode("n1", 8, nil)}}, []*batchv1.Job{job("queued", "team", 2, 4, "nvidia.com/gpu")})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, verdicts(t, p), "queued", Unqueued, "runs no Kueue")
	if len(p.NeverFit()) != 0 {
		t.Errorf("never fit: %+v", p.NeverFit())
	}
}
