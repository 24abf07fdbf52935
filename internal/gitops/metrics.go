// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Sync metrics, served with controller-runtime's on /metrics.
var (
	metricRevision = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trainops_sync_revision_info", Help: "The revision last applied (value 1)."}, []string{"revision"})
	metricDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "trainops_sync_duration_seconds", Help: "Time of one sync: fetch, render, validate, apply and prune.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)}, []string{"result"})
	metricApplied  = prometheus.NewCounter(prometheus.CounterOpts{Name: "trainops_sync_objects_applied_total", Help: "Objects applied from Git."})
	metricPruned   = prometheus.NewCounter(prometheus.CounterOpts{Name: "trainops_sync_objects_pruned_total", Help: "Objects deleted because they left Git."})
	metricFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trainops_sync_failures_total", Help: "Failed syncs by reason."}, []string{"reason"})
	metricWebhook  = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trainops_webhook_calls_total", Help: "Calls of the push webhook by result: requested (a sync asked for), refused, busy, ignored, duplicate, failed."}, []string{"result"})
	metricLastOK   = prometheus.NewGauge(prometheus.GaugeOpts{Name: "trainops_sync_last_success_timestamp_seconds", Help: "When a sync last succeeded (Unix time)."})

	revisionMu   sync.Mutex
	lastRevision string
)

func init() {
	metrics.Registry.MustRegister(metricRevision, metricDuration, metricApplied, metricPruned, metricFailures, metricLastOK, metricWebhook)
}

// observe records one sync.
func observe(res Result, err error) {
	if err != nil {
		metricDuration.WithLabelValues("failure").Observe(res.Duration.Seconds())
		metricFailures.WithLabelValues(ReasonOf(err)).Inc()
		return
	}
	metricDuration.WithLabelValues("success").Observe(res.Duration.Seconds())
	metricApplied.Add(float64(len(res.Applied)))
	metricPruned.Add(float64(len(res.Pruned)))
	metricLastOK.SetToCurrentTime()
	revisionMu.Lock()
	defer revisionMu.Unlock()
	if res.Revision != lastRevision {
		metricRevision.Reset()
		metricRevision.WithLabelValues(res.Revision).Set(1)
		lastRevision = res.Revision
	}
}
