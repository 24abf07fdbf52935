// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/realnode"
	"github.com/trainops/trainops/internal/testenv"
)

// RealNodeFigures are a distributed PyJob's times on the real node (2
// workers × 2 torchrun processes training testdata/realnode/train.py),
// against the floor: the same Indexed Job and headless Service created
// directly, which the same pods run. Medians of the runs.
type RealNodeFigures struct {
	Date string `json:"date,omitempty"`
	// RunningSeconds is from the create to every worker pod Running.
	RunningSeconds float64 `json:"runningSeconds"`
	RunningFloor   float64 `json:"runningFloorSeconds"`
	RunningRatio   float64 `json:"runningRatio"`
	// CompleteSeconds is from the create to the training run done (the
	// PyJob Succeeded; the floor's Job Complete).
	CompleteSeconds float64 `json:"completeSeconds"`
	CompleteFloor   float64 `json:"completeFloorSeconds"`
	CompleteRatio   float64 `json:"completeRatio"`
	// StackPeakMiB is the peak resident memory of the whole stack: control
	// plane, kubelet, containerd, kube-proxy, CoreDNS (not the containers).
	StackPeakMiB float64 `json:"stackPeakMiB"`
}

// realNodeOut names the file the namespace's run writes its figures to.
const realNodeOut = "BENCH_REALNODE_OUT"

// realNodeCase measures on the real node when the machine can run one
// (BENCH_REALNODE=0 skips it), in a namespace of its own: this program
// runs again there. nil when not measured.
func realNodeCase() (*RealNodeFigures, error) {
	if os.Getenv("BENCH_REALNODE") == "0" {
		return nil, nil
	}
	if missing := testenv.NodeMissing(); missing != "" {
		say("no real-node figure: %s", missing)
		return nil, nil
	}
	out, err := os.CreateTemp("", "trainops-bench-realnode-*.json")
	if err != nil {
		return nil, err
	}
	out.Close()
	defer os.Remove(out.Name())
	os.Setenv(realNodeOut, out.Name())
	say("real node: a distributed PyJob against a plain Indexed Job")
	code, err := testenv.RunInNodeNamespace()
	if err != nil || code != 0 {
		return nil, fmt.Errorf("real-node run: exit %d: %v", code, err)
	}
	raw, err := os.ReadFile(out.Name())
	if err != nil {
		return nil, err
	}
	var f RealNodeFigures
	return &f, json.Unmarshal(raw, &f)
}

// measureRealNode runs inside the node's namespace: it starts the
// environment with a real node, warms the node (the first container of
// the training image unpacks it), then measures the floor and the PyJob
// in turn, runs times, and writes the medians to $BENCH_REALNODE_OUT.
func measureRealNode(ctx context.Context, runs int) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k, err := realnode.Start(rctx, nil)
	if err != nil {
		return err
	}
	defer k.Env.Stop()
	script := k.Script
	image := k.Images.Training
	if _, _, err := realNodeFloor(ctx, k, "warm-up-", image, script); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	var running, complete, runningFloor, completeFloor []float64
	for i := range runs {
		r, d, err := realNodeFloor(ctx, k, "floor-", image, script)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		runningFloor, completeFloor = append(runningFloor, r), append(completeFloor, d)
		r, d, err = realNodePyJob(ctx, k, "pyjob-", image, script)
		if err != nil {
			return fmt.Errorf("PyJob: %w", err)
		}
		running, complete = append(running, r), append(complete, d)
		say("  run %d: pods Running %.1fs (floor %.1fs), done %.1fs (floor %.1fs)", i+1, r, runningFloor[i], d, completeFloor[i])
	}
	f := RealNodeFigures{
		RunningSeconds: median(running), RunningFloor: median(runningFloor),
		CompleteSeconds: median(complete), CompleteFloor: median(completeFloor),
		StackPeakMiB: k.Env.StackPeakMiB(),
	}
	f.RunningRatio, f.CompleteRatio = f.RunningSeconds/f.RunningFloor, f.CompleteSeconds/f.CompleteFloor
	b, _ := json.Marshal(f)
	return os.WriteFile(os.Getenv(realNodeOut), b, 0o644)
}

// settled passes a run's figures on once ns is released (realnode.Release),
// so the next run starts from a quiet node.
func settled(ctx context.Context, c client.Client, ns string) func(running, done float64, err error) (float64, float64, error) {
	return func(running, done float64, err error) (float64, float64, error) {
		if err != nil {
			return 0, 0, err
		}
		return running, done, realnode.Release(ctx, c, ns)
	}
}

// realNodeFloor creates, in a namespace ns, the Job and headless Service
// trainops would make for the PyJob, directly, and times them.
func realNodeFloor(ctx context.Context, k *realnode.Cluster, prefix, image, script string) (running, done float64, err error) {
	c := k.Client
	ns, err := realnode.Namespace(ctx, k.Env, c, prefix)
	if err != nil {
		return 0, 0, err
	}
	children, err := builder.ForPyJob(realnode.DistributedPyJob(ns, "train", image, script, ""))
	if err != nil {
		return 0, 0, err
	}
	children.Job.OwnerReferences, children.Service.OwnerReferences = nil, nil
	start := time.Now()
	for _, o := range []client.Object{children.Job, children.Service} {
		if err := c.Create(ctx, o, client.FieldOwner("floor")); err != nil {
			return 0, 0, err
		}
	}
	return settled(ctx, c, ns)(timeRun(ctx, c, ns, start, func() (bool, error) {
		var j batchv1.Job
		if err := c.Get(ctx, client.ObjectKeyFromObject(children.Job), &j); err != nil {
			return false, err
		}
		for _, cond := range j.Status.Conditions {
			if cond.Status == corev1.ConditionTrue && (cond.Type == batchv1.JobFailed) {
				return false, fmt.Errorf("the floor's Job failed: %s", cond.Message)
			}
		}
		return j.Status.CompletionTime != nil, nil
	}))
}

// realNodePyJob creates the PyJob in a namespace ns and times it.
func realNodePyJob(ctx context.Context, k *realnode.Cluster, prefix, image, script string) (running, done float64, err error) {
	c := k.Client
	ns, err := realnode.Namespace(ctx, k.Env, c, prefix)
	if err != nil {
		return 0, 0, err
	}
	pj := realnode.DistributedPyJob(ns, "train", image, script, "")
	start := time.Now()
	if err := c.Create(ctx, pj); err != nil {
		return 0, 0, err
	}
	return settled(ctx, c, ns)(timeRun(ctx, c, ns, start, func() (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pj), pj); err != nil {
			return false, err
		}
		if pj.Status.Phase == trainingv1alpha1.PyJobFailed {
			return false, fmt.Errorf("the PyJob failed: %s", pj.Status.Message)
		}
		return pj.Status.Phase == trainingv1alpha1.PyJobSucceeded, nil
	}))
}

// timeRun polls until ns has 2 Running pods (running) and until finished
// says the run is done, both as seconds since start.
func timeRun(ctx context.Context, c client.Client, ns string, start time.Time, finished func() (bool, error)) (running, done float64, err error) {
	deadline := start.Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		if running == 0 {
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
				return 0, 0, err
			}
			n := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded {
					n++
				}
			}
			if n >= 2 {
				running = time.Since(start).Seconds()
			}
		}
		ok, err := finished()
		if err != nil {
			return 0, 0, err
		}
		if ok {
			if running == 0 {
				running = time.Since(start).Seconds() // both ran between two looks
			}
			return running, time.Since(start).Seconds(), nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, 0, fmt.Errorf("the run in %s was not done after 5m", ns)
}
