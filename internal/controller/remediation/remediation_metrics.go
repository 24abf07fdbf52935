// SPDX-License-Identifier: Apache-2.0

package remediation

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainops/trainops/internal/gpuhealth"
)

// The metrics of GPU node remediation.
var (
	remediationOutOfService = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "trainops_gpu_nodes_out_of_service",
		Help: "GPU nodes trainops has taken out of service, by cause (the value of its taint).",
	}, []string{"cause"})
	remediationWaiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "trainops_gpu_nodes_waiting",
		Help: "Failing GPU nodes left in service because remediation.maxUnavailable nodes are out of service already.",
	})
	remediationUnknown = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "trainops_gpu_nodes_health_unknown",
		Help: "GPU nodes whose DCGM exporter did not answer, or not in its format, at the last pass.",
	})
	remediationReported = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trainops_gpu_problems_reported_total",
		Help: "GPU problems reported and not acted on, by cause: XIDs that fail only their job, and XIDs or condition reasons not in the table (cause unlisted).",
	}, []string{"cause"})
)

func init() {
	metrics.Registry.MustRegister(remediationOutOfService, remediationWaiting, remediationUnknown, remediationReported)
}

// metricCause is a problem's cause as a metric label: one label for all
// that are not in the table, so an odd reading cannot grow the series.
func metricCause(p gpuhealth.Problem) string {
	if !p.Known {
		return "unlisted"
	}
	return p.Cause
}

// observeRemediation sets the gauges from a pass.
func observeRemediation(views []nodeView, plan remediationPlan) {
	remediationOutOfService.Reset()
	unknown := 0
	for _, v := range views {
		if _, back := plan.giveBack[v.node.Name]; back {
			continue
		}
		s := v.state
		if t, ok := plan.takeOut[v.node.Name]; ok {
			s = t
		}
		if s != nil {
			remediationOutOfService.WithLabelValues(s.Cause).Inc()
		} else if v.health.health == healthUnknown {
			unknown++
		}
	}
	remediationWaiting.Set(float64(len(plan.waiting)))
	remediationUnknown.Set(float64(unknown))
}
