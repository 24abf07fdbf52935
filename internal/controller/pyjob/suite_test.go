// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/ctrltest"
	"github.com/trainops/trainops/internal/workload"
)

// crashImage is an image whose pods exit 1 (a kwok stage).
const crashImage = "registry.trainops.test/trainer:crash"

// testPolicy is the workload policy on its defaults, but for
// refuseSecretRefs, which one of the refused cases needs.
var testPolicy = workload.Policy{RefuseSecretRefs: true}

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
	os.Exit(testenv.Main(m, testenv.Options{Full: true, GPUNodes: 2, CPUNodes: 1, Stages: []string{testenv.FailImageStage(crashImage)}}, &env, startManager))
}

// startManager runs the PyJob reconciler against the package's cluster.
func startManager(ctx context.Context, e *testenv.Env) (err error) {
	suite, err = ctrltest.Start(ctx, e, pyjobCache(), func(mgr ctrl.Manager, d children.Deps) error {
		logs, err := LogsOf(mgr)
		if err != nil {
			return err
		}
		return (&Reconciler{Deps: d, Policy: testPolicy, Logs: logs}).SetupWithManager(mgr)
	})
	if err == nil {
		k8s, mgr = suite.Client, suite.Manager
	}
	return err
}

// pyjobCache is the cache trainops runs the PyJob reconciler with.
func pyjobCache() cache.Options {
	opts := children.CacheOptions()
	opts.ByObject[&corev1.Pod{}] = WorkerPodCache()
	return opts
}
