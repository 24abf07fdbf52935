// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/eventrec"
	"github.com/trainops/trainops/internal/scheme"
	"github.com/trainops/trainops/internal/workload"
)

// EventSource names trainops in the Events it records.
const EventSource = gpuv1alpha1.EventReporter

// NewScheme knows the built-in kinds and trainops's APIs (see package
// scheme).
func NewScheme() *runtime.Scheme { return scheme.New() }

// Setup registers the PyJob, SREAgent and ClusterPolicy reconcilers and
// the GPU nodes' labelling, remediation and driver upgrades; they
// record Events with ev. Every PyJob is held to policy. hold, when not nil, holds back a sync's own new
// PyJobs while it applies them.
func Setup(mgr ctrl.Manager, cfg config.Controllers, policy workload.Policy, ev *eventrec.Writer, hold SyncHold) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	rec := ev.For(EventSource)
	compared := NewCompared(ComparedSize)
	deps := func() Deps {
		return Deps{Client: mgr.GetClient(), Recorder: rec, APIReader: mgr.GetAPIReader(), Config: cfg, Compared: compared}
	}
	logs, err := LogsOf(mgr)
	if err != nil {
		return err
	}
	if err := (&PyJobReconciler{Deps: deps(), Policy: policy, Hold: hold, Logs: logs}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&SREAgentReconciler{Deps: deps()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&GPUNodeReconciler{Client: mgr.GetClient(), Config: cfg}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&RemediationReconciler{Deps: deps()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&DriverUpgradeReconciler{Deps: deps()}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&ClusterPolicyReconciler{Deps: deps()}).SetupWithManager(mgr)
}
