// SPDX-License-Identifier: Apache-2.0

package kueuetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/testenv"
)

// TestAWorkloadPriorityClassDecidesWhoRuns: a PyJob's
// workloadPriorityClassName reaches Kueue, which gives its workload that
// class's priority: an urgent run preempts a batch run in the same queue,
// whose ranks all stop, and the urgent run's pods keep the default
// scheduling priority (only priorityClassName changes that). A PyJob
// naming the class without a queue is refused by the API server.
func TestAWorkloadPriorityClassDecidesWhoRuns(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	queues(t, ns, 4)
	classes := map[string]int64{"batch-" + ns: 10, "urgent-" + ns: 1000}
	for name, v := range classes {
		wpc := testenv.KueueObject("WorkloadPriorityClass", "", name, nil)
		wpc.Object["value"] = v
		if err := k8s.Create(ctx, wpc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), wpc) })
	}
	batch := newPyJob(ns, "batch", longImage, 1, 4)
	batch.Spec.WorkloadPriorityClassName = "batch-" + ns
	createPyJob(t, batch)
	waitPhase(t, ns, batch.Name, trainingv1alpha1.PyJobRunning, 60*time.Second, "1/1 workers running")
	wl := workload(t, batch)
	prio, _, _ := unstructured.NestedInt64(wl.Object, "spec", "priority")
	ref, _, _ := unstructured.NestedString(wl.Object, "spec", "priorityClassRef", "name")
	if prio != classes["batch-"+ns] || ref != "batch-"+ns {
		t.Errorf("the batch run's workload: priority %d, class %q", prio, ref)
	}

	urgent := newPyJob(ns, "urgent", longImage, 1, 4)
	urgent.Spec.WorkloadPriorityClassName = "urgent-" + ns
	preempts(t, urgent, batch)
	for _, p := range workerPods(t, ns, urgent.Name) {
		if p.Spec.PriorityClassName != "" || p.Spec.Priority != nil && *p.Spec.Priority != 0 {
			t.Errorf("pod %s: scheduling priority %q %v: the workload class changed it", p.Name, p.Spec.PriorityClassName, p.Spec.Priority)
		}
	}

	noQueue := newPyJob(ns, "no-queue", longImage, 1, 4)
	noQueue.Spec.QueueName = ""
	noQueue.Spec.WorkloadPriorityClassName = "urgent-" + ns
	err := k8s.Create(ctx, noQueue)
	if err == nil || !strings.Contains(err.Error(), "workloadPriorityClassName is Kueue's: it needs queueName") {
		t.Errorf("a class without a queue: %v", err)
	}
}
