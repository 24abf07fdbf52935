// SPDX-License-Identifier: Apache-2.0

// Package realnode holds the tests that need containers to really run:
// PyJobs training on the test environment's real node (kubelet,
// containerd, runc), beside the kwok nodes.
package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/eventrec"
	"github.com/trainops/trainops/internal/testenv"
)

var (
	env *testenv.Env
	k8s client.Client // uncached, for assertions
	// images are the references of `make image`'s images, by file.
	images map[string]string
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{RealNode: true, GPUNodes: 1, GPUsPerNode: 4, Progress: os.Stderr}, &env, setup))
}

// setup runs trainops's reconcilers against the cluster and loads the
// training image into the real node.
func setup(ctx context.Context, e *testenv.Env) error {
	scheme := controller.NewScheme()
	var err error
	if k8s, err = client.New(e.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if e.RealNode == "" {
		return nil
	}
	if images, err = testenv.Images(); err != nil {
		return err
	}
	dir, err := testenv.ImageDir()
	if err != nil {
		return err
	}
	start := time.Now()
	for _, f := range []string{"pytorch.tar", "trainops.tar"} {
		if err := e.ImportImage(ctx, filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "training and trainops images loaded in %s\n", time.Since(start).Round(time.Second))
	if err := taintKwokNodes(ctx, e); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(e.Dir, "logs", "trainops.log"))
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logFile)))
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controller.CacheOptions(),
	})
	if err != nil {
		return err
	}
	ev, err := eventrec.Attach(mgr)
	if err != nil {
		return err
	}
	cfg := config.Controllers{MaxConcurrentReconciles: 4, RetryDelay: 2 * time.Second, AgentImage: images["trainops.tar"]}
	if err := controller.Setup(mgr, cfg, nil, ev); err != nil {
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

// kwokTaint keeps pods off the kwok nodes, which run nothing: every pod of
// these tests must run on the real node.
const kwokTaint = "trainops.test/simulated"

// taintKwokNodes taints every node but the real one with kwokTaint.
func taintKwokNodes(ctx context.Context, e *testenv.Env) error {
	for _, name := range e.Nodes {
		n := &corev1.Node{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: kwokTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule})
		if err := k8s.Update(ctx, n); err != nil {
			return err
		}
	}
	return nil
}
