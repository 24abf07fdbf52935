// SPDX-License-Identifier: Apache-2.0

package kueuetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

// queues creates a ResourceFlavor, a ClusterQueue with gpus GPUs of quota
// (and CPU and memory enough for anything) and a LocalQueue "team" in ns
// that submits to it; it returns the ClusterQueue's name.
func queues(t *testing.T, ns string, gpus int64) string {
	t.Helper()
	return queuesOf(t, ns, gpus, testenv.KueueObject("ResourceFlavor", "", "gpu-"+ns, map[string]any{}))
}

// queuesOf is queues with flavor (named gpu-<ns>), and the objects it
// needs before it (a Topology).
func queuesOf(t *testing.T, ns string, gpus int64, flavor ...client.Object) string {
	t.Helper()
	ctx := context.Background()
	cq := "cq-" + ns
	objs := append(flavor, []client.Object{
		testenv.GPUClusterQueue(cq, "gpu-"+ns, gpus, map[string]any{"withinClusterQueue": "LowerPriority"}),
		testenv.KueueObject("LocalQueue", ns, "team", map[string]any{"clusterQueue": cq}),
	}...)
	for _, o := range objs {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatalf("create %s %s: %v", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for _, o := range objs {
			_ = k8s.Delete(context.Background(), o)
		}
	})
	// Kueue admits nothing to a ClusterQueue it has not found active.
	testenv.Eventually(t, 30*time.Second, func() error {
		u := testenv.KueueObject("ClusterQueue", "", cq, nil)
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return err
		}
		if c := conditionOf(u, "Active"); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("ClusterQueue %s not active: %+v", cq, c)
		}
		return nil
	})
	return cq
}

// conditionOf is a Kueue object's condition of type typ; nil when none.
func conditionOf(u *unstructured.Unstructured, typ string) *metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		var c metav1.Condition
		if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c) == nil && c.Type == typ {
			return &c
		}
	}
	return nil
}

// newPyJob is a PyJob of workers × gpus on the queue "team".
func newPyJob(ns, name, image string, workers, gpus int32) *trainingv1alpha1.PyJob {
	return &trainingv1alpha1.PyJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: trainingv1alpha1.PyJobSpec{
			Image: image, Command: []string{"python", "train.py"},
			Workers: workers, GPU: gpus, QueueName: "team",
		},
	}
}

// workload is the Workload Kueue made for pj's Job.
func workload(t *testing.T, pj *trainingv1alpha1.PyJob) *unstructured.Unstructured {
	t.Helper()
	wl, err := workloadOf(pj)
	if err != nil {
		t.Fatal(err)
	}
	return wl
}

// workloadOf is workload, or why there is none (yet).
func workloadOf(pj *trainingv1alpha1.PyJob) (*unstructured.Unstructured, error) {
	job := &batchv1.Job{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: pj.Namespace, Name: builder.JobName(pj)}, job); err != nil {
		return nil, err
	}
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("kueue.x-k8s.io/v1beta2")
	list.SetKind("WorkloadList")
	if err := k8s.List(context.Background(), list, client.InNamespace(pj.Namespace), client.MatchingLabels{"kueue.x-k8s.io/job-uid": string(job.UID)}); err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("%d Workloads for Job %s, want 1", len(list.Items), job.Name)
	}
	return &list.Items[0], nil
}

func getPyJob(t *testing.T, ns, name string) *trainingv1alpha1.PyJob {
	t.Helper()
	pj := &trainingv1alpha1.PyJob{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pj); err != nil {
		t.Fatal(err)
	}
	return pj
}

// waitPhase waits until the PyJob's phase is want and its message holds
// every part of says.
func waitPhase(t *testing.T, ns, name string, want trainingv1alpha1.PyJobPhase, timeout time.Duration, says ...string) *trainingv1alpha1.PyJob {
	t.Helper()
	var pj *trainingv1alpha1.PyJob
	testenv.Eventually(t, timeout, func() error {
		pj = getPyJob(t, ns, name)
		if pj.Status.Phase != want {
			return fmt.Errorf("phase %q (%s), want %s", pj.Status.Phase, pj.Status.Message, want)
		}
		for _, s := range says {
			if !strings.Contains(pj.Status.Message, s) {
				return fmt.Errorf("message %q does not say %q", pj.Status.Message, s)
			}
		}
		return nil
	})
	return pj
}

// workerPods lists the pods of a PyJob.
func workerPods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{builder.LabelPyJob: name}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// running counts the pods that run.
func running(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// TestAQueuedPyJobIsAdmittedWholeAndRuns: a 2-worker PyJob on a queue with
// quota for both is admitted by Kueue with both ranks in one pod set, and
// runs to the end.
func TestAQueuedPyJobIsAdmittedWholeAndRuns(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	queues(t, ns, 8)
	pj := newPyJob(ns, "fits", "registry.trainops.test/trainer:v1", 2, 4)
	createPyJob(t, pj)
	waitPhase(t, ns, pj.Name, trainingv1alpha1.PyJobSucceeded, 90*time.Second)
	wl := workload(t, pj)
	if c := conditionOf(wl, "Admitted"); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Workload %s not admitted: %+v", wl.GetName(), c)
	}
	sets, _, _ := unstructured.NestedSlice(wl.Object, "status", "admission", "podSetAssignments")
	if len(sets) != 1 {
		t.Fatalf("admission has %d pod sets, want the Job's one: %v", len(sets), sets)
	}
	set := sets[0].(map[string]any)
	if count, _, _ := unstructured.NestedInt64(set, "count"); count != 2 {
		t.Errorf("admitted %d ranks, want both: %v", count, set)
	}
	if gpus, _, _ := unstructured.NestedString(set, "resourceUsage", string(builder.GPUResource)); gpus != "8" {
		t.Errorf("admitted %q GPUs, want 2 × 4 = 8: %v", gpus, set)
	}
}

// TestAPyJobBeyondItsQuotaWaitsWhole: a 3 × 4-GPU PyJob on a queue of 8
// GPUs has no pod at all, and its status says it is queued with Kueue's
// reason; given the quota it runs all three ranks.
func TestAPyJobBeyondItsQuotaWaitsWhole(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	cq := queues(t, ns, 8)
	pj := newPyJob(ns, "too-big", longImage, 3, 4)
	createPyJob(t, pj)
	got := waitPhase(t, ns, pj.Name, trainingv1alpha1.PyJobQueued, 60*time.Second, "insufficient quota", string(builder.GPUResource))
	if c := meta.FindStatusCondition(got.Status.Conditions, "Ready"); c == nil || c.Reason != "Queued" {
		t.Errorf("Ready condition %+v, want reason Queued", c)
	}
	// The status quoted Kueue's verdict, so Kueue has decided: no rank of
	// the PyJob may exist.
	if pods := workerPods(t, ns, pj.Name); len(pods) != 0 {
		t.Fatalf("%d pods of a PyJob that does not fit its quota", len(pods))
	}
	if n := got.Status.Active; n != 0 {
		t.Errorf("status.active %d while queued", n)
	}
	t.Logf("queued: %s", got.Status.Message)

	setGPUQuota(t, cq, 16)
	waitPhase(t, ns, pj.Name, trainingv1alpha1.PyJobRunning, 60*time.Second, "3/3 workers running")
	if n := running(workerPods(t, ns, pj.Name)); n != 3 {
		t.Errorf("%d ranks run, want 3", n)
	}
	deletePyJob(t, pj)
}

// createPyJob creates pj, and deletes it when the test ends: a failed
// test leaves no rank holding GPUs the next one needs.
func createPyJob(t *testing.T, pj *trainingv1alpha1.PyJob) {
	t.Helper()
	if err := k8s.Create(context.Background(), pj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k8s.Delete(context.Background(), pj, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
}

// deletePyJob deletes pj and its Job's pods with it.
func deletePyJob(t *testing.T, pj *trainingv1alpha1.PyJob) {
	t.Helper()
	if err := k8s.Delete(context.Background(), pj, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
}

// TestAPreemptedPyJobStopsWholeAndResumesWithoutAFailure: a running
// low-priority PyJob that a higher-priority one preempts stops every rank
// (it holds no GPU), is queued again with Kueue's reason, counts no
// failure or restart, and runs again once the other finished.
func TestAPreemptedPyJobStopsWholeAndResumesWithoutAFailure(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	queues(t, ns, 8)
	for name, v := range map[string]int32{"low-" + ns: 10, "high-" + ns: 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}
		if err := k8s.Create(ctx, pc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), pc) })
	}
	low := newPyJob(ns, "low", longImage, 2, 4)
	low.Spec.PriorityClassName = "low-" + ns
	createPyJob(t, low)
	waitPhase(t, ns, low.Name, trainingv1alpha1.PyJobRunning, 60*time.Second, "2/2 workers running")
	// Kueue's all-or-nothing admission saw every rank ready.
	testenv.Eventually(t, 30*time.Second, func() error {
		if c := conditionOf(workload(t, low), "PodsReady"); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("PodsReady %+v", c)
		}
		return nil
	})

	high := newPyJob(ns, "high", longImage, 2, 4)
	high.Spec.PriorityClassName = "high-" + ns
	preempts(t, high, low)
	got := getPyJob(t, ns, low.Name)
	if got.Status.Restarts != 0 || got.Status.Attempt != 0 || got.Status.Runs != 1 {
		t.Errorf("preemption counted: restarts %d, attempt %d, runs %d", got.Status.Restarts, got.Status.Attempt, got.Status.Runs)
	}
	deletePyJob(t, high)
	got = waitPhase(t, ns, low.Name, trainingv1alpha1.PyJobRunning, 90*time.Second, "2/2 workers running")
	if got.Status.Restarts != 0 || got.Status.Runs != 1 {
		t.Errorf("resumed run counted a failure: restarts %d, runs %d", got.Status.Restarts, got.Status.Runs)
	}
	deletePyJob(t, low)
}

// preempts creates high and waits until it preempted low: low is Queued
// with Kueue's reason, high runs every worker, and none of low's pods is
// left, so it holds no GPU; an Event on low says it was preempted.
func preempts(t *testing.T, high, low *trainingv1alpha1.PyJob) {
	t.Helper()
	createPyJob(t, high)
	waitPhase(t, low.Namespace, low.Name, trainingv1alpha1.PyJobQueued, 60*time.Second, "Preempted")
	waitPhase(t, high.Namespace, high.Name, trainingv1alpha1.PyJobRunning, 60*time.Second, fmt.Sprintf("%d/%d workers running", high.Spec.Workers, high.Spec.Workers))
	testenv.Eventually(t, 30*time.Second, func() error {
		if pods := workerPods(t, low.Namespace, low.Name); len(pods) != 0 {
			return fmt.Errorf("%d pods of the preempted PyJob remain", len(pods))
		}
		return nil
	})
	if note := testenv.EventReasons(t, k8s, low.Namespace, low.Name)["Preempted"]; !strings.Contains(note, "Kueue evicted Workload") {
		t.Errorf("no Preempted Event for %s (%q)", low.Name, note)
	}
}

// TestRanksNotReadyInTimeAreEvictedWhole: under waitForPodsReady a PyJob
// whose ranks cannot start (their image cannot be pulled) is evicted by
// Kueue whole after its timeout: every pod of the admission stops, the
// PyJob is queued again with Kueue's reason, and no failure is counted.
func TestRanksNotReadyInTimeAreEvictedWhole(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	queues(t, ns, 8)
	pj := newPyJob(ns, "stuck", stuckImage, 2, 4)
	createPyJob(t, pj)
	first := map[string]bool{}
	testenv.Eventually(t, 60*time.Second, func() error {
		pods := workerPods(t, ns, pj.Name)
		if len(pods) != 2 {
			return fmt.Errorf("%d pods, want both ranks admitted", len(pods))
		}
		for _, p := range pods {
			first[string(p.UID)] = true
		}
		return nil
	})
	got := waitPhase(t, ns, pj.Name, trainingv1alpha1.PyJobQueued, podsReadyTimeout+60*time.Second, "PodsReadyTimeout")
	if got.Status.Restarts != 0 || got.Status.Attempt != 0 {
		t.Errorf("eviction counted as a failure: restarts %d, attempt %d", got.Status.Restarts, got.Status.Attempt)
	}
	// Evicted whole: no pod of that admission is left.
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, p := range workerPods(t, ns, pj.Name) {
			if first[string(p.UID)] {
				return fmt.Errorf("pod %s of the evicted admission remains (%s)", p.Name, p.Status.Phase)
			}
		}
		return nil
	})
	deletePyJob(t, pj)
}

// TestARestartIsANewWorkloadThatQueuesAgain: a gang restart (a rank
// failed, failurePolicy.maxRestarts left) deletes the attempt's Job and
// creates the next, which Kueue sees as a new Workload: it queues again,
// beside a PyJob that was waiting for the same GPUs, and either may be
// admitted first. This is the cost docs/kueue.md states. Whichever goes
// first, the two never hold the quota at once, the restart is counted
// once, and both run in the end.
func TestARestartIsANewWorkloadThatQueuesAgain(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	queues(t, ns, 8)
	waiting := newPyJob(ns, "waiting", longImage, 2, 4)
	failing := newPyJob(ns, "failing", crashImage, 2, 4)
	failing.Spec.FailurePolicy = &trainingv1alpha1.PyJobFailurePolicy{MaxRestarts: ptr.To[int32](1)}
	// The failing PyJob is admitted first: the other is created once it
	// holds the quota, and waits; only then (its ranks run for
	// crashAfter) does a rank of the first fail.
	createPyJob(t, failing)
	var first string
	testenv.Eventually(t, 60*time.Second, func() error {
		wl, err := workloadOf(failing)
		if err != nil {
			return err
		}
		if c := conditionOf(wl, "Admitted"); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("failing not admitted: %+v", c)
		}
		first = string(wl.GetUID())
		return nil
	})
	createPyJob(t, waiting)
	waitPhase(t, ns, waiting.Name, trainingv1alpha1.PyJobQueued, crashAfter, "insufficient unused quota")
	if got := getPyJob(t, ns, failing.Name); got.Status.Restarts != 0 {
		t.Fatalf("the first attempt failed before the other PyJob waited: %s", got.Status.Message)
	}
	// The restart's Job has a Workload of its own. Until one of the two
	// runs, the quota of 8 never holds both (4 ranks of 4 GPUs).
	var winner string
	testenv.Eventually(t, 90*time.Second, func() error {
		if n := running(workerPods(t, ns, failing.Name)) + running(workerPods(t, ns, waiting.Name)); n > 2 {
			t.Fatalf("%d ranks of 4 GPUs run on a queue of 8", n)
		}
		pj := getPyJob(t, ns, failing.Name)
		if pj.Status.Restarts != 1 {
			return fmt.Errorf("restarts %d", pj.Status.Restarts)
		}
		if wl, err := workloadOf(failing); err != nil || string(wl.GetUID()) == first {
			return fmt.Errorf("no new Workload for the restart yet (%v)", err)
		}
		switch {
		case getPyJob(t, ns, waiting.Name).Status.Phase == trainingv1alpha1.PyJobRunning && pj.Status.Phase == trainingv1alpha1.PyJobQueued:
			winner = waiting.Name
		case pj.Status.Phase == trainingv1alpha1.PyJobFailed || pj.Status.Phase == trainingv1alpha1.PyJobRunning:
			winner = failing.Name
		default:
			return fmt.Errorf("failing %s, waiting %s", pj.Status.Phase, getPyJob(t, ns, waiting.Name).Status.Phase)
		}
		return nil
	})
	t.Logf("admitted first after the restart: %s", winner)
	if winner == waiting.Name {
		// The restart lost its GPUs to the waiting run; it runs (and
		// fails for good: no restart is left) once they are free.
		deletePyJob(t, waiting)
		waitPhase(t, ns, failing.Name, trainingv1alpha1.PyJobFailed, 90*time.Second)
	} else {
		waitPhase(t, ns, failing.Name, trainingv1alpha1.PyJobFailed, 90*time.Second)
		waitPhase(t, ns, waiting.Name, trainingv1alpha1.PyJobRunning, 90*time.Second, "2/2 workers running")
	}
	if got := getPyJob(t, ns, failing.Name); got.Status.Restarts != 1 {
		t.Errorf("restarts %d, want the one", got.Status.Restarts)
	}
}

// TestTopologyAnnotationsReachKueue: Kueue's topology-aware scheduling
// annotation set in the PyJob's pod template places every rank on one
// node: the Workload's admission carries Kueue's topology assignment, and
// both workers run on the same node.
func TestTopologyAnnotationsReachKueue(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	topology := "hosts-" + ns
	queuesOf(t, ns, 16,
		testenv.KueueObject("Topology", "", topology, map[string]any{"levels": []any{map[string]any{"nodeLabel": corev1.LabelHostname}}}),
		testenv.KueueObject("ResourceFlavor", "", "gpu-"+ns, map[string]any{
			"nodeLabels":   map[string]any{testenv.GPUNodeLabel: "true"},
			"topologyName": topology,
		}))
	pj := newPyJob(ns, "packed", longImage, 2, 4)
	pj.Spec.Template = &runtime.RawExtension{Raw: []byte(`{"metadata":{"annotations":{"kueue.x-k8s.io/podset-required-topology":"` + corev1.LabelHostname + `"}}}`)}
	createPyJob(t, pj)
	waitPhase(t, ns, pj.Name, trainingv1alpha1.PyJobRunning, 90*time.Second, "2/2 workers running")
	sets, _, _ := unstructured.NestedSlice(workload(t, pj).Object, "status", "admission", "podSetAssignments")
	if len(sets) != 1 {
		t.Fatalf("pod sets %v", sets)
	}
	if _, ok, _ := unstructured.NestedMap(sets[0].(map[string]any), "topologyAssignment"); !ok {
		t.Errorf("no topology assignment in the admission: %v", sets[0])
	}
	nodes := map[string]bool{}
	for _, p := range workerPods(t, ns, pj.Name) {
		nodes[p.Spec.NodeName] = true
	}
	if len(nodes) != 1 {
		t.Errorf("ranks on nodes %v, want one node", nodes)
	}
	deletePyJob(t, pj)
}
