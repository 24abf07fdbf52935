// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/realnode"
	"github.com/trainops/trainops/internal/testenv"
)

// realTraining runs a distributed PyJob on a real node (kubelet,
// containerd, runc) when this machine can run one, and shows its training
// log; otherwise it says why the PyJobs ran on simulated nodes only. The
// real node runs in a network namespace of its own, with a control plane of
// its own: this program runs again there (realTrainingInside).
func realTraining() error {
	if os.Getenv("DEMO_REAL_NODE") == "0" {
		say("DEMO_REAL_NODE=0: the PyJobs ran on simulated (kwok) nodes only")
		return nil
	}
	if missing := testenv.NodeMissing(); missing != "" {
		say("the PyJobs ran on simulated (kwok) nodes only, which run no container: %s", missing)
		return nil
	}
	say("now a PyJob for real: a real node (kubelet, containerd, runc) in a network namespace of its own")
	code, err := testenv.RunInNodeNamespace()
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("the real node's run exited %d", code)
	}
	return nil
}

// realTrainingInside, inside the node's namespace, starts a cluster with
// the real node, runs a PyJob of 2 workers × 2 torchrun processes on it
// and prints what its ranks logged.
func realTrainingInside(ctx context.Context) error {
	say("starting a cluster with a real node, loading the training image into it")
	k, err := realnode.Start(ctx, progressWriter{})
	if err != nil {
		return err
	}
	defer k.Env.Stop()
	c, e, images, script := k.Client, k.Env, k.Images, k.Script
	ns, err := realnode.Namespace(ctx, e, c, "ml-real-")
	if err != nil {
		return err
	}
	pj := realnode.DistributedPyJob(ns, "ddp", images.Training, script, "")
	say("PyJob %s/ddp: 2 workers × 2 processes, torchrun with gloo, testdata/realnode/train.py, image %s from the node's registry", ns, images.Training)
	if err := c.Create(ctx, pj); err != nil {
		return err
	}
	start, last := time.Now(), ""
	for pj.Status.Phase != trainingv1alpha1.PyJobSucceeded {
		if pj.Status.Phase == trainingv1alpha1.PyJobFailed || time.Since(start) > 5*time.Minute || ctx.Err() != nil {
			return fmt.Errorf("PyJob %s/ddp: %s %s", ns, pj.Status.Phase, pj.Status.Message)
		}
		time.Sleep(250 * time.Millisecond)
		if err := c.Get(ctx, client.ObjectKeyFromObject(pj), pj); err != nil {
			return err
		}
		if s := string(pj.Status.Phase) + ": " + pj.Status.Message; s != last && pj.Status.Phase != "" {
			say("  %s", s)
			last = s
		}
	}
	say("PyJob %s/ddp Succeeded in %s; what rank 0 and the last step of each rank logged:", ns, time.Since(start).Round(100*time.Millisecond))
	return printRankLogs(ctx, e, ns)
}

// printRankLogs prints rank 0's log, and every rank's last step.
func printRankLogs(ctx context.Context, e *testenv.Env, ns string) error {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		raw, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: builder.TrainerContainer}).DoRaw(ctx)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			if strings.HasPrefix(line, "rank=0 ") || strings.Contains(line, "step=19 ") || strings.Contains(line, "checkpoint") {
				fmt.Printf("    %s | %s\n", p.Name, line)
			}
		}
	}
	return nil
}
