// SPDX-License-Identifier: Apache-2.0

// Package upgradetest runs driver upgrades against a local control plane
// of its own: a cluster has one ClusterPolicy, and a rollout cordons and
// drains every GPU node.
package upgradetest

import (
	"context"
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/controller/gpustacktest"
	"github.com/trainops/trainops/internal/testenv"
)

var (
	env *testenv.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Full: true, GPUNodes: 3, Stages: []string{testenv.CrashLoopStage(brokenDriver, "CrashLoopBackOff", 3, "Error")}}, &env, start))
}

// start runs the GPU stack's reconcilers and the driver upgrade.
func start(ctx context.Context, e *testenv.Env) (err error) {
	k8s, err = gpustacktest.Start(ctx, e, func(mgr ctrl.Manager, deps controller.Deps) error {
		return (&controller.DriverUpgradeReconciler{Deps: deps}).SetupWithManager(mgr)
	})
	return err
}
