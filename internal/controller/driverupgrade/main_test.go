// SPDX-License-Identifier: Apache-2.0

// The driver upgrade tests run against a local control plane of the
// package's own: a cluster has one ClusterPolicy, and a rollout cordons
// and drains every GPU node.
package driverupgrade_test

import (
	"context"
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/controller/driverupgrade"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/gpustacktest"
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
	k8s, err = gpustacktest.Start(ctx, e, func(mgr ctrl.Manager, deps children.Deps) error {
		return (&driverupgrade.Reconciler{Deps: deps}).SetupWithManager(mgr)
	})
	return err
}
