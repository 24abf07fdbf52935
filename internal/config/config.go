// Package config is trainops's typed configuration. Flags, environment and
// the config file are read into it at the edge (cmd); nothing below reads
// them directly.
package config

import (
	"fmt"
	"time"
)

// Controllers tunes the PyJob, SREAgent and ClusterPolicy reconcilers, with
// the names GPU operators use for the same knobs.
type Controllers struct {
	// MaxConcurrentReconciles is how many objects of one kind reconcile at
	// once.
	MaxConcurrentReconciles int `json:"maxConcurrentReconciles"`
	// RetryDelay is how long a failed reconcile waits before it is retried.
	RetryDelay time.Duration `json:"retryDelay"`
	// AgentImage is the image SREAgents run when they name none: trainops's
	// own image, whose `agent` subcommand is the agent.
	AgentImage string `json:"agentImage"`
}

// DefaultAgentImage is trainops's published image.
const DefaultAgentImage = "ghcr.io/trainops/trainops"

// DefaultControllers are the controller settings when nothing is configured.
func DefaultControllers(version string) Controllers {
	tag := version
	if tag == "" || tag == "dev" {
		tag = "latest"
	}
	return Controllers{
		MaxConcurrentReconciles: 4,
		RetryDelay:              10 * time.Second,
		AgentImage:              DefaultAgentImage + ":" + tag,
	}
}

// Validate reports the first setting that cannot work.
func (c Controllers) Validate() error {
	switch {
	case c.MaxConcurrentReconciles < 1:
		return fmt.Errorf("maxConcurrentReconciles must be at least 1, got %d", c.MaxConcurrentReconciles)
	case c.RetryDelay <= 0:
		return fmt.Errorf("retryDelay must be positive, got %s", c.RetryDelay)
	case c.AgentImage == "":
		return fmt.Errorf("agentImage must not be empty")
	}
	return nil
}

// Run is the configuration of `trainops run`.
type Run struct {
	// Kubeconfig is the cluster to manage; empty means in-cluster or the
	// usual KUBECONFIG / ~/.kube/config.
	Kubeconfig string
	// Controllers tunes the reconcilers.
	Controllers Controllers
	// MetricsAddr serves Prometheus metrics ("0" turns it off).
	MetricsAddr string
	// HealthAddr serves /healthz and /readyz ("0" turns it off).
	HealthAddr string
	// LeaderElection makes only one replica act at a time.
	LeaderElection bool
	// LeaderElectionNamespace holds the leader lease; the pod's namespace
	// in-cluster when empty.
	LeaderElectionNamespace string
}

// Validate reports the first setting that cannot work.
func (r Run) Validate() error {
	return r.Controllers.Validate()
}
