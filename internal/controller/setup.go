// SPDX-License-Identifier: Apache-2.0

// Package controller puts trainops's workload reconcilers together: one
// package per concern beneath it (pyjob, sreagent, clusterpolicy with the
// GPU nodes' labelling, remediation, driverupgrade), the children they
// apply and compare (children), and the GPU-node operations remediation
// and driver upgrades share (gpustack). Setup registers them all in a
// manager; CacheOptions is the cache they read.
package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/controller/clusterpolicy"
	"github.com/trainops/trainops/internal/controller/driverupgrade"
	"github.com/trainops/trainops/internal/controller/pyjob"
	"github.com/trainops/trainops/internal/controller/remediation"
	"github.com/trainops/trainops/internal/controller/sreagent"
	"github.com/trainops/trainops/internal/eventrec"
	"github.com/trainops/trainops/internal/scheme"
	"github.com/trainops/trainops/internal/workload"
)

// EventSource names trainops in the Events it records.
const EventSource = gpuv1alpha1.EventReporter

// NewScheme knows the built-in kinds and trainops's APIs (see package
// scheme).
func NewScheme() *runtime.Scheme { return scheme.New() }

// CacheOptions is the cache of a manager running the reconcilers: the
// children's (children.CacheOptions) and the PyJobs' worker pods
// (pyjob.WorkerPodCache).
func CacheOptions() cache.Options {
	opts := children.CacheOptions()
	opts.ByObject[&corev1.Pod{}] = pyjob.WorkerPodCache()
	return opts
}

// Setup registers the PyJob, SREAgent and ClusterPolicy reconcilers and
// the GPU nodes' labelling, remediation and driver upgrades; they read
// and write with c (nil: the manager's client) and record Events with
// ev. Every PyJob is held to policy. hold, when not nil, holds back a
// sync's own new PyJobs, SREAgents and ClusterPolicies while it applies
// them.
func Setup(mgr ctrl.Manager, c client.Client, cfg config.Controllers, policy workload.Policy, ev *eventrec.Writer, hold children.SyncHold) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if c == nil {
		c = mgr.GetClient()
	}
	deps := children.Deps{Client: c, Recorder: ev.For(EventSource), APIReader: mgr.GetAPIReader(), Config: cfg,
		Compared: children.NewCompared(children.ComparedSize), Hold: hold}
	logs, err := pyjob.LogsOf(mgr)
	if err != nil {
		return err
	}
	positions, err := pyjob.PositionsOf(mgr)
	if err != nil {
		return err
	}
	if err := (&pyjob.Reconciler{Deps: deps, Policy: policy, Logs: logs, Positions: positions}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&sreagent.Reconciler{Deps: deps}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&clusterpolicy.NodeReconciler{Client: c, Config: cfg}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&remediation.Reconciler{Deps: deps}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&driverupgrade.Reconciler{Deps: deps}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&clusterpolicy.Reconciler{Deps: deps}).SetupWithManager(mgr)
}
