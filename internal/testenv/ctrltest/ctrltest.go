// SPDX-License-Identifier: Apache-2.0

// Package ctrltest is the test support of the reconciler packages: a
// manager on a package's local control plane running that package's
// reconcilers, the configuration they run with in tests, and helpers that
// read what they did. It is imported by tests only.
package ctrltest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/eventrec"
	"github.com/trainops/trainops/internal/scheme"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

// IsolatedLabel marks PyJobs and SREAgents a suite's shared manager does
// not see, for a test that runs a reconciler of its own.
const IsolatedLabel = "trainops.test/isolated"

// Config is what the reconcilers run with in tests: retries come soon.
var Config = config.Controllers{MaxConcurrentReconciles: 4, RetryDelay: 2 * time.Second, AgentImage: "ghcr.io/trainops/trainops:test"}

// Suite is a test package's shared manager on its local control plane.
type Suite struct {
	Env *testenv.Env
	// Client is uncached, for assertions.
	Client  client.Client
	Manager ctrl.Manager
	// Events writes the manager's Events, as trainops does.
	Events *eventrec.Writer
	// Deps are the dependencies the manager's reconcilers were given.
	Deps children.Deps
}

// Start runs a manager against e whose cache is opts (PyJobs and
// SREAgents labelled IsolatedLabel left out), sets up its reconcilers
// with setup, and waits for its caches. The manager stops with ctx.
func Start(ctx context.Context, e *testenv.Env, opts cache.Options, setup func(ctrl.Manager, children.Deps) error) (*Suite, error) {
	s := &Suite{Env: e}
	sch := scheme.New()
	var err error
	if s.Client, err = client.New(e.Config, client.Options{Scheme: sch}); err != nil {
		return nil, err
	}
	notIsolated, err := labels.Parse("!" + IsolatedLabel)
	if err != nil {
		return nil, err
	}
	if opts.ByObject == nil {
		opts.ByObject = map[client.Object]cache.ByObject{}
	}
	opts.ByObject[&trainingv1alpha1.PyJob{}] = cache.ByObject{Label: notIsolated}
	opts.ByObject[&aiopsv1alpha1.SREAgent{}] = cache.ByObject{Label: notIsolated}
	s.Manager, err = ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 sch,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  opts,
	})
	if err != nil {
		return nil, err
	}
	if s.Events, err = eventrec.Attach(s.Manager, nil); err != nil {
		return nil, err
	}
	s.Deps = children.Deps{Client: s.Manager.GetClient(), Recorder: s.Events.For(gpuv1alpha1.EventReporter), APIReader: s.Manager.GetAPIReader(),
		Config: Config, Compared: children.NewCompared(children.ComparedSize)}
	if err := setup(s.Manager, s.Deps); err != nil {
		return nil, err
	}
	go func() {
		if err := s.Manager.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	if !s.Manager.GetCache().WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("cache did not sync")
	}
	return s, nil
}

// IsolatedManager is a manager of a test's own for namespace ns: it sees
// only the PyJobs and SREAgents labelled IsolatedLabel, which the shared
// manager leaves alone. StartIsolated starts it.
func (s *Suite) IsolatedManager(t *testing.T, ns string) ctrl.Manager {
	t.Helper()
	isolated, err := labels.Parse(IsolatedLabel)
	if err != nil {
		t.Fatal(err)
	}
	own, err := ctrl.NewManager(s.Env.Config, ctrl.Options{
		Scheme:                 s.Manager.GetScheme(),
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

// StartIsolated starts own until the test ends and waits for its caches.
func StartIsolated(t *testing.T, own ctrl.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = own.Start(ctx) }()
	if !own.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
}

// WaitStalledNotOwned waits for obj to be Stalled because a child's name
// is taken, and returns the message.
func WaitStalledNotOwned(t testing.TB, c client.Client, obj interface {
	client.Object
	conditions.Setter
}) string {
	t.Helper()
	var msg string
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		if conditions.GetReason(obj, status.StalledCondition) != children.ReasonConflict {
			return fmt.Errorf("not stalled for a taken name: %v", conditions.GetMessage(obj, status.ReadyCondition))
		}
		msg = conditions.GetMessage(obj, status.StalledCondition)
		return nil
	})
	return msg
}
