// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/config"
	controllers "github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/eventrec"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/render"
)

// isolatedLabel marks PyJobs the package's shared manager does not see.
const isolatedLabel = "trainops.test/isolated"

var (
	env *testenv.Env
	k8s client.Client // uncached, for assertions
)

// TestMain runs the GitSync tests on a control plane of their own, with
// the workload reconcilers running, as in trainops: each test starts its
// own GitSync reconciler.
func TestMain(m *testing.M) {
	render.ServeIfChild() // a test that renders starts this binary as the child
	os.Exit(testenv.Main(m, testenv.Options{Full: true, GPUNodes: 2, CPUNodes: 1}, &env, startManager))
}

// startManager runs the PyJob, SREAgent and ClusterPolicy reconcilers
// for the whole package.
func startManager(ctx context.Context, e *testenv.Env) error {
	scheme := controllers.NewScheme()
	var err error
	if k8s, err = client.New(e.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	notIsolated, err := labels.Parse("!" + isolatedLabel)
	if err != nil {
		return err
	}
	cacheOptions := controllers.CacheOptions()
	cacheOptions.ByObject[&trainingv1alpha1.PyJob{}] = cache.ByObject{Label: notIsolated}
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Cache: cacheOptions,
	})
	if err != nil {
		return err
	}
	ev, err := eventrec.Attach(mgr)
	if err != nil {
		return err
	}
	cfg := config.Controllers{MaxConcurrentReconciles: 4, RetryDelay: 2 * time.Second, AgentImage: "ghcr.io/trainops/trainops:test"}
	if err := controllers.Setup(mgr, cfg, ev); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("cache did not sync")
	}
	return nil
}

func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	testenv.Eventually(t, timeout, check)
}

// update is testenv.Update with the package's client.
func update[T client.Object](t *testing.T, obj T, change func(T)) {
	t.Helper()
	testenv.Update(t, k8s, obj, change)
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	return testenv.NewNamespace(t, k8s)
}
