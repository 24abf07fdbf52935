// SPDX-License-Identifier: Apache-2.0

package clusterpolicy

import (
	"context"
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/ctrltest"
)

// suiteGPUNodes is the number of simulated GPU nodes of the suite's
// cluster.
const suiteGPUNodes = 2

var (
	env   *testenv.Env
	suite *ctrltest.Suite
	// k8s is uncached, for assertions; mgr runs the package's
	// reconcilers for every test.
	k8s     client.Client
	mgr     ctrl.Manager
	testCfg = ctrltest.Config
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Full: true, GPUNodes: suiteGPUNodes, CPUNodes: 1}, &env, startManager))
}

// startManager runs the ClusterPolicy reconciler and the GPU nodes' labelling against the package's cluster.
func startManager(ctx context.Context, e *testenv.Env) (err error) {
	suite, err = ctrltest.Start(ctx, e, children.CacheOptions(), func(mgr ctrl.Manager, d children.Deps) error {
		if err := (&NodeReconciler{Client: mgr.GetClient(), Config: d.Config}).SetupWithManager(mgr); err != nil {
			return err
		}
		return (&Reconciler{Deps: d}).SetupWithManager(mgr)
	})
	if err == nil {
		k8s, mgr = suite.Client, suite.Manager
	}
	return err
}
