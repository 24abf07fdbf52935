// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/apicase"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/eventrec"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/workload"
)

// isolatedLabel marks PyJobs and SREAgents the package's shared manager does
// not see, for a test that runs a reconciler of its own.
const isolatedLabel = "trainops.test/isolated"

// suiteGPUNodes is the number of simulated GPU nodes of the suite's
// cluster.
const suiteGPUNodes = 2

// crashImage is an image whose pods exit 1 (a kwok stage).
const crashImage = "registry.trainops.test/trainer:crash"

var (
	env     *testenv.Env
	k8s     client.Client // uncached, for assertions
	mgr     ctrl.Manager
	testCfg = config.Controllers{MaxConcurrentReconciles: 4, RetryDelay: 2 * time.Second, AgentImage: "ghcr.io/trainops/trainops:test"}
	// testPolicy is the workload policy on its defaults, but for
	// refuseSecretRefs, which one of the refused cases needs.
	testPolicy = workload.Policy{RefuseSecretRefs: true}
	// suiteEvents writes the shared manager's Events, as trainops does.
	suiteEvents *eventrec.Writer
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Full: true, GPUNodes: suiteGPUNodes, CPUNodes: 1, Stages: []string{testenv.FailImageStage(crashImage)}}, &env, startManager))
}

// startManager runs the three reconcilers against the local cluster for the
// whole package.
func startManager(ctx context.Context, e *testenv.Env) error {
	scheme := NewScheme()
	var err error
	if k8s, err = client.New(e.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	// PyJobs labelled isolatedLabel belong to a test's own manager.
	notIsolated, err := labels.Parse("!" + isolatedLabel)
	if err != nil {
		return err
	}
	// The caches trainops runs with, and the PyJobs and SREAgents of the
	// shared manager.
	cacheOptions := CacheOptions()
	cacheOptions.ByObject[&trainingv1alpha1.PyJob{}] = cache.ByObject{Label: notIsolated}
	cacheOptions.ByObject[&aiopsv1alpha1.SREAgent{}] = cache.ByObject{Label: notIsolated}
	mgr, err = ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cacheOptions,
	})
	if err != nil {
		return err
	}
	if suiteEvents, err = eventrec.Attach(mgr); err != nil {
		return err
	}
	if err := Setup(mgr, testCfg, testPolicy, suiteEvents, nil); err != nil {
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

// loadCase reads a file of testdata into a typed object.
func loadCase(t testing.TB, path string, into client.Object) {
	t.Helper()
	cases, err := apicase.Load(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if c.Path == path {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(c.Objects[0].Object, into); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no case %s", path)
}

func seed(name string) string { return filepath.Join("..", "..", "testdata", "seeds", name+".yaml") }

// installYAML creates the object in a YAML file.
func installYAML(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &u.Object); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
}

// isolatedManager is a manager of a test's own for namespace ns: it sees
// only the PyJobs and SREAgents labelled isolatedLabel, which the shared
// manager leaves alone.
func isolatedManager(t *testing.T, ns string) ctrl.Manager {
	t.Helper()
	isolated, err := labels.Parse(isolatedLabel)
	if err != nil {
		t.Fatal(err)
	}
	own, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 mgr.GetScheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}},
			ByObject: map[client.Object]cache.ByObject{
				&trainingv1alpha1.PyJob{}: {Label: isolated},
				&aiopsv1alpha1.SREAgent{}: {Label: isolated},
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return own
}

// startIsolated starts own until the test ends and waits for its caches.
func startIsolated(t *testing.T, own ctrl.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = own.Start(ctx) }()
	if !own.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
}
