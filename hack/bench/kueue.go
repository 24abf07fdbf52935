// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/controller/pyjob"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/ctrltest"
)

// KueueFigures are what a gang restart costs under Kueue: how long from a
// rank's failure until every rank of the next attempt runs, with and
// without a queue, and, with another PyJob waiting for the same GPUs, how
// often the restart kept them.
type KueueFigures struct {
	Date string `json:"date,omitempty"`
	Runs int    `json:"runs"`
	// PlainSeconds is the time from the Job's failure to every rank of
	// the next attempt Running, for a PyJob without a queue.
	PlainSeconds float64 `json:"plainRestartSeconds"`
	// QueuedSeconds is the same under Kueue, the ClusterQueue's quota
	// otherwise unused.
	QueuedSeconds float64 `json:"queuedRestartSeconds"`
	QueuedRatio   float64 `json:"queuedRestartRatio"`
	// Kept and Lost count the runs where another PyJob waited for the
	// same GPUs: the restart ran first, or the waiting PyJob did.
	Kept int `json:"keptGPUs"`
	Lost int `json:"lostGPUs"`
}

// The workers of the restart case: crashImage's exit 1 after crashAfter,
// longImage's run until stopped (kwok stages).
const (
	benchLongImage  = "registry.trainops.test/trainer:long"
	benchCrashImage = "registry.trainops.test/trainer:crash"
	benchCrashAfter = 6 * time.Second
	// benchQueueGPUs is the ClusterQueue's GPU quota: one 2 × 4-GPU PyJob.
	benchQueueGPUs = 8
)

// kueueCase measures the gang restart under Kueue (BENCH_KUEUE=0 keeps the
// last run's figures).
func kueueCase(ctx context.Context, last *Results) (*KueueFigures, error) {
	if os.Getenv("BENCH_KUEUE") == "0" {
		if last != nil {
			return last.Kueue, nil
		}
		return nil, nil
	}
	say("a gang restart under Kueue")
	k, err := measureKueue(ctx, 2*runs()+1)
	if err != nil {
		return nil, fmt.Errorf("a gang restart under Kueue: %w", err)
	}
	k.Date = time.Now().UTC().Format("2006-01-02")
	return k, nil
}

// measureKueue starts a full control plane with Kueue and trainops's PyJob
// reconciler, and restarts a PyJob runs times in each of three ways:
// without a queue, under Kueue alone, and under Kueue with another PyJob
// waiting.
func measureKueue(ctx context.Context, runs int) (*KueueFigures, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	say("  starting the control plane, Kueue and the PyJob reconciler")
	env, err := testenv.Start(ctx, testenv.Options{Full: true, GPUNodes: 2, GPUsPerNode: 8,
		Stages: []string{testenv.KeepRunningStage(benchLongImage), testenv.FailLaterStage(benchCrashImage, benchCrashAfter)}})
	if err != nil {
		return nil, err
	}
	defer env.Stop()
	if err := env.StartKueue(ctx, testenv.KueueOptions{}); err != nil {
		return nil, err
	}
	opts := children.CacheOptions()
	opts.ByObject[&corev1.Pod{}] = pyjob.WorkerPodCache()
	suite, err := ctrltest.Start(ctx, env, opts, func(mgr ctrl.Manager, d children.Deps) error {
		return (&pyjob.Reconciler{Deps: d}).SetupWithManager(mgr)
	})
	if err != nil {
		return nil, err
	}
	c := suite.Client
	if err := kueueQueues(ctx, c); err != nil {
		return nil, err
	}
	f := &KueueFigures{Runs: runs}
	var plain, queued []float64
	for i := range runs {
		for _, queue := range []string{"", "team"} {
			d, _, err := restartOnce(ctx, c, fmt.Sprintf("run-%d%s", i, queue), queue, false)
			if err != nil {
				return nil, err
			}
			if queue == "" {
				plain = append(plain, d.Seconds())
			} else {
				queued = append(queued, d.Seconds())
			}
		}
		_, kept, err := restartOnce(ctx, c, fmt.Sprintf("run-%d-waiting", i), "team", true)
		if err != nil {
			return nil, err
		}
		if kept {
			f.Kept++
		} else {
			f.Lost++
		}
	}
	f.PlainSeconds, f.QueuedSeconds = median(plain), median(queued)
	if f.PlainSeconds > 0 {
		f.QueuedRatio = f.QueuedSeconds / f.PlainSeconds
	}
	say("  restart %.2f s without a queue, %.2f s under Kueue (×%.2f); with a PyJob waiting the restart kept its GPUs %d of %d times",
		f.PlainSeconds, f.QueuedSeconds, f.QueuedRatio, f.Kept, f.Kept+f.Lost)
	return f, nil
}

// kueueQueues makes the queues of the case: a ClusterQueue of
// benchQueueGPUs GPUs and a LocalQueue "team" in every namespace it is
// asked in (made by restartOnce).
func kueueQueues(ctx context.Context, c client.Client) error {
	for _, o := range []*unstructured.Unstructured{
		testenv.KueueObject("ResourceFlavor", "", "gpu", map[string]any{}),
		testenv.GPUClusterQueue("gpu", "gpu", benchQueueGPUs, nil),
	} {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %s: %w", o.GetKind(), err)
		}
	}
	return nil
}

// restartOnce runs a 2 × 4-GPU PyJob in a namespace of its own (on queue,
// when not empty) whose ranks fail after benchCrashAfter, with one restart
// allowed, and measures from the Job's failure, as the harness sees it,
// to every rank of the next attempt Running. With waiting, another
// PyJob for the same GPUs waits in the queue when the rank fails; kept
// reports whether the restart ran before it.
func restartOnce(ctx context.Context, c client.Client, name, queue string, waiting bool) (d time.Duration, kept bool, err error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "restart-" + name}}
	if err := c.Create(ctx, ns); err != nil {
		return 0, false, err
	}
	defer func() {
		_ = c.Delete(context.Background(), ns)
	}()
	if queue != "" {
		// The runs before have left the quota.
		if err := poll(time.Minute, func() (bool, error) { return queueEmpty(ctx, c) }); err != nil {
			return 0, false, fmt.Errorf("%s: the ClusterQueue still holds the runs before: %w", name, err)
		}
		lq := testenv.KueueObject("LocalQueue", ns.Name, queue, map[string]any{"clusterQueue": "gpu"})
		if err := c.Create(ctx, lq); err != nil {
			return 0, false, err
		}
	}
	pj := benchPyJob(ns.Name, "failing", benchCrashImage, queue)
	pj.Spec.FailurePolicy = &trainingv1alpha1.PyJobFailurePolicy{MaxRestarts: ptr.To[int32](1)}
	if err := c.Create(ctx, pj); err != nil {
		return 0, false, err
	}
	defer func() {
		_ = c.Delete(context.Background(), pj, client.PropagationPolicy(metav1.DeletePropagationForeground))
	}()
	if err := poll(time.Minute, func() (bool, error) { return pyJobRunning(ctx, c, pj, 0) }); err != nil {
		return 0, false, fmt.Errorf("%s: the first attempt: %w (%s)", name, err, phaseOf(ctx, c, pj))
	}
	var other *trainingv1alpha1.PyJob
	if waiting {
		other = benchPyJob(ns.Name, "waiting", benchLongImage, queue)
		if err := c.Create(ctx, other); err != nil {
			return 0, false, err
		}
		defer func() {
			_ = c.Delete(context.Background(), other, client.PropagationPolicy(metav1.DeletePropagationForeground))
		}()
		// Kueue found no quota for it before the rank fails.
		if err := poll(benchCrashAfter/2, func() (bool, error) {
			got := &trainingv1alpha1.PyJob{}
			err := c.Get(ctx, client.ObjectKeyFromObject(other), got)
			return err == nil && got.Status.Queue != nil && got.Status.Queue.Reason == "Pending", client.IgnoreNotFound(err)
		}); err != nil {
			return 0, false, fmt.Errorf("%s: the other PyJob does not wait: %w", name, err)
		}
	}
	// The Job fails benchCrashAfter after its ranks started.
	job := &batchv1.Job{}
	if err := poll(time.Minute, func() (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: builder.JobName(pj)}, job); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		for _, cond := range job.Status.Conditions {
			if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return 0, false, fmt.Errorf("%s: the failure: %w", name, err)
	}
	failed := time.Now()
	if err := poll(2*time.Minute, func() (bool, error) {
		running, err := pyJobRunning(ctx, c, pj, 1)
		if running || err != nil || other == nil {
			return running, err
		}
		// The waiting PyJob ran first: the restart lost its GPUs.
		return pyJobRunning(ctx, c, other, 0)
	}); err != nil {
		return 0, false, fmt.Errorf("%s: the restart: %w (%s)", name, err, phaseOf(ctx, c, pj))
	}
	d = time.Since(failed)
	running, err := pyJobRunning(ctx, c, pj, 1)
	return d, running, err
}

// benchPyJob is a 2 × 4-GPU PyJob of image.
func benchPyJob(ns, name, image, queue string) *trainingv1alpha1.PyJob {
	return &trainingv1alpha1.PyJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: trainingv1alpha1.PyJobSpec{
			Image: image, Command: []string{"python", "train.py"},
			Workers: 2, GPU: 4, QueueName: queue,
		},
	}
}

// pyJobRunning reports whether every rank of pj's attempt runs.
func pyJobRunning(ctx context.Context, c client.Client, pj *trainingv1alpha1.PyJob, attempt int32) (bool, error) {
	got := &trainingv1alpha1.PyJob{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pj), got); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	if got.Status.Phase == trainingv1alpha1.PyJobFailed {
		return false, fmt.Errorf("%s failed: %s", pj.Name, got.Status.Message)
	}
	return got.Status.Phase == trainingv1alpha1.PyJobRunning && got.Status.Attempt == attempt, nil
}

// queueEmpty reports whether the case's ClusterQueue reserves quota for
// no Workload and has none waiting.
func queueEmpty(ctx context.Context, c client.Client) (bool, error) {
	cq := testenv.KueueObject("ClusterQueue", "", "gpu", nil)
	if err := c.Get(ctx, client.ObjectKeyFromObject(cq), cq); err != nil {
		return false, err
	}
	reserving, _, _ := unstructured.NestedInt64(cq.Object, "status", "reservingWorkloads")
	pending, _, _ := unstructured.NestedInt64(cq.Object, "status", "pendingWorkloads")
	return reserving == 0 && pending == 0, nil
}

// phaseOf says where pj is, for an error.
func phaseOf(ctx context.Context, c client.Client, pj *trainingv1alpha1.PyJob) string {
	got := &trainingv1alpha1.PyJob{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pj), got); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s %s attempt %d: %s", pj.Name, got.Status.Phase, got.Status.Attempt, got.Status.Message)
}

// writeKueue writes the figures' section of docs/benchmarks.md.
func writeKueue(b *strings.Builder, k *KueueFigures) {
	if k == nil {
		return
	}
	fmt.Fprintf(b, `
## A gang restart under Kueue

A PyJob of 2 workers × 4 GPUs on kwok's GPU nodes whose ranks fail
after %.0f s, with one restart allowed, on the full control plane with Kueue
v0.17.0 (built from its module) and trainops's PyJob reconciler. From the
attempt's Job failing, as the harness sees it, to every rank of the next
attempt running: without a queue, and on a ClusterQueue of %d GPUs (the
PyJob's own) with nothing else on it. Then, %d times, the same with a
second 2 × 4-GPU PyJob waiting in the queue when the rank fails: how often
the restart ran first ([why](kueue.md#what-a-gang-restart-costs-under-kueue)).
Medians of %d runs, measured on %s.

| figure | value |
|---|---|
| restart, no queue | %.2f s |
| restart under Kueue, quota free | %.2f s (×%.2f) |
| restart under Kueue, another PyJob waiting: kept its GPUs | %d of %d |
`, benchCrashAfter.Seconds(), benchQueueGPUs, k.Runs, k.Runs, k.Date, k.PlainSeconds, k.QueuedSeconds, k.QueuedRatio, k.Kept, k.Kept+k.Lost)
}
