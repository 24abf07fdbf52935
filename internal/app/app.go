// Package app assembles `trainops run`: one controller-runtime manager that
// hosts the reconcilers, with metrics, health probes and leader election.
package app

import (
	"context"
	"fmt"
	"net/http"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
)

// LeaderElectionID names the lease replicas compete for.
const LeaderElectionID = "trainops-leader.trainops.dev"

// Run runs trainops until ctx is cancelled.
func Run(ctx context.Context, cfg config.Run, restCfg *rest.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	// API Priority and Fairness protects the server: client-side throttling
	// would only slow trainops down.
	restCfg = rest.CopyConfig(restCfg)
	restCfg.QPS, restCfg.Burst = -1, 0
	restCfg.UserAgent = "trainops"

	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                        controller.NewScheme(),
		Metrics:                       metricsserver.Options{BindAddress: cfg.MetricsAddr},
		HealthProbeBindAddress:        cfg.HealthAddr,
		LeaderElection:                cfg.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       cfg.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := controller.Setup(mgr, cfg.Controllers); err != nil {
		return fmt.Errorf("set up controllers: %w", err)
	}
	if cfg.HealthAddr != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("readyz", func(r *http.Request) error {
			if !mgr.GetCache().WaitForCacheSync(r.Context()) {
				return fmt.Errorf("informer caches not synced")
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return mgr.Start(ctx)
}
