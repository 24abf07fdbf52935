// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

var (
	kueueOnce sync.Once
	kueueErr  error
)

// startKueue runs Kueue once for the tests that need it (its webhooks act
// only on Jobs with a queue name).
func startKueue(t *testing.T) {
	t.Helper()
	kueueOnce.Do(func() { kueueErr = env.StartKueue(context.Background(), testenv.KueueOptions{}) })
	if kueueErr != nil {
		t.Fatal(kueueErr)
	}
}

// resumedFrom finds the step a rank resumed from in the workers' logs.
var resumedFrom = regexp.MustCompile(`rank=0 attempt=0 resumed from the checkpoint of step (\d+)`)

// TestAPreemptedRunResumesFromItsCheckpoint: under a real Kueue, a
// 2 × 2-process torchrun PyJob trains on the real node's GPUs, the whole
// quota of its ClusterQueue, checkpointing each step. A PyJob of a higher
// WorkloadPriorityClass preempts it: every rank stops (none holds a GPU)
// and the PyJob is Queued with a Preempted Event. The other runs on the
// GPUs it freed; when it is done, Kueue admits the first again, which
// resumes from its last checkpoint, not from scratch, and succeeds with
// no restart counted.
func TestAPreemptedRunResumesFromItsCheckpoint(t *testing.T) {
	testenv.RequireRealNode(t, env)
	startKueue(t)
	ctx := context.Background()
	ns := newNamespace(t)
	t.Cleanup(func() { release(t, ns) })
	outputVolume(t, ns, "output")
	gpus := 2 * 2 // DistributedPyJob's workers × GPUs
	objs := []client.Object{
		priorityClass("batch-"+ns, 10),
		priorityClass("urgent-"+ns, 1000),
		testenv.KueueObject("ResourceFlavor", "", "node-"+ns, map[string]any{}),
		testenv.GPUClusterQueue("cq-"+ns, "node-"+ns, int64(gpus), map[string]any{"withinClusterQueue": "LowerPriority"}),
		testenv.KueueObject("LocalQueue", ns, "team", map[string]any{"clusterQueue": "cq-" + ns}),
	}
	for _, o := range objs {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
	script, err := TrainScript()
	if err != nil {
		t.Fatal(err)
	}
	batch := DistributedPyJob(ns, "batch", images.Training, script, "output")
	batch.Spec.Env = []corev1.EnvVar{{Name: "STEPS", Value: "16"}, {Name: "STEP_SECONDS", Value: "1"}}
	batch.Spec.QueueName, batch.Spec.WorkloadPriorityClassName = "team", "batch-"+ns
	batch.Spec.FailurePolicy = &trainingv1alpha1.PyJobFailurePolicy{MaxRestarts: ptr.To[int32](0)}
	if err := k8s.Create(ctx, batch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 3*time.Minute, func() error {
		if logs := podLogs(t, ns, builder.TrainerContainer); !strings.Contains(logs, "rank=0 world=4 step=3 ") {
			return fmt.Errorf("the batch run has not trained step 3:\n%s", lastLines(logs, 6))
		}
		return nil
	})

	urgent := DistributedPyJob(ns, "urgent", images.Training, script, "")
	urgent.Spec.Env = []corev1.EnvVar{{Name: "STEPS", Value: "2"}}
	urgent.Spec.QueueName, urgent.Spec.WorkloadPriorityClassName = "team", "urgent-"+ns
	if err := k8s.Create(ctx, urgent); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(batch), batch); err != nil {
			return err
		}
		if batch.Status.Phase != trainingv1alpha1.PyJobQueued || !strings.Contains(batch.Status.Message, "Preempted") {
			return fmt.Errorf("batch is %s: %s", batch.Status.Phase, batch.Status.Message)
		}
		return nil
	})
	if notes := events(t, ns, batch.Name, "Preempted"); len(notes) == 0 {
		t.Error("no Preempted Event for the batch run")
	}
	waitFor(t, urgent, trainingv1alpha1.PyJobSucceeded, 3*time.Minute)

	waitFor(t, batch, trainingv1alpha1.PyJobSucceeded, 4*time.Minute)
	if batch.Status.Restarts != 0 || batch.Status.Attempt != 0 || batch.Status.Runs != 1 {
		t.Errorf("the preemption was counted: restarts %d attempt %d runs %d", batch.Status.Restarts, batch.Status.Attempt, batch.Status.Runs)
	}
	logs := podLogs(t, ns, builder.TrainerContainer)
	m := resumedFrom.FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("the batch run did not resume from a checkpoint:\n%s", logs)
	}
	if step, _ := strconv.Atoi(m[1]); step < 3 {
		t.Errorf("resumed from step %d, after training step 3", step)
	}
	if !strings.Contains(logs, "rank=0 world=4 step=15 ") {
		t.Errorf("the batch run did not train to its last step:\n%s", logs)
	}
}

// priorityClass is a Kueue WorkloadPriorityClass of value.
func priorityClass(name string, value int64) *unstructured.Unstructured {
	u := testenv.KueueObject("WorkloadPriorityClass", "", name, nil)
	u.Object["value"] = value
	return u
}

// lastLines is the end of s, for a failure's message.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
