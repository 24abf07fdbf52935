// SPDX-License-Identifier: Apache-2.0

package kueuetest

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/controller/pyjob"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/ctrltest"
)

// longImage's workers run until stopped; stuckImage's never start (their
// image cannot be pulled). Other images' workers finish at once.
const (
	longImage  = "registry.trainops.test/trainer:long"
	stuckImage = "registry.trainops.test/trainer:missing"
	// crashImage's workers exit 1 after running for crashAfter.
	crashImage = "registry.trainops.test/trainer:crash"
	crashAfter = 10 * time.Second
	// podsReadyTimeout is Kueue's waitForPodsReady timeout here.
	podsReadyTimeout = 15 * time.Second
)

var (
	env *testenv.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	stages := append([]string{testenv.KeepRunningStage(longImage), testenv.FailLaterStage(crashImage, crashAfter)}, testenv.ImagePullFailStages(stuckImage)...)
	os.Exit(testenv.Main(m, testenv.Options{Full: true, GPUNodes: 2, GPUsPerNode: 8, Stages: stages}, &env, start))
}

// start runs Kueue, then the PyJob reconciler.
func start(ctx context.Context, e *testenv.Env) error {
	if err := e.StartKueue(ctx, testenv.KueueOptions{WaitForPodsReady: podsReadyTimeout}); err != nil {
		return err
	}
	opts := children.CacheOptions()
	opts.ByObject[&corev1.Pod{}] = pyjob.WorkerPodCache()
	suite, err := ctrltest.Start(ctx, e, opts, func(mgr ctrl.Manager, d children.Deps) error {
		logs, err := pyjob.LogsOf(mgr)
		if err != nil {
			return err
		}
		positions, err := pyjob.PositionsOf(mgr)
		if err != nil {
			return err
		}
		return (&pyjob.Reconciler{Deps: d, Logs: logs, Positions: positions}).SetupWithManager(mgr)
	})
	if err == nil {
		k8s = suite.Client
	}
	return err
}
