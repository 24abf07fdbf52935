// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// SyncHold holds back the first reconcile of a sync's own new PyJobs
// while that sync is still applying the revision they came from: a
// revision of thousands of PyJobs is applied first, then their Jobs are
// created, rather than both sharing the API server at once. Only the
// objects of a sync that says, in its status, that it is applying are
// held, and each at most for the wait Held gives; nothing else waits
// (another team's PyJob, a sync's later edits, any object of a sync that
// is done). The GitSync reconciler provides it (internal/gitsync); the
// workload reconcilers know nothing else of syncs.
type SyncHold interface {
	// Held reports whether obj came from a sync still applying its
	// revision, and how much longer it may be held at most.
	Held(ctx context.Context, obj client.Object) (wait time.Duration, held bool)
	// Releases is the watch that queues the held objects once their sync
	// is done: the events of obj's kind that pred lets through are mapped
	// by fn to the objects of list's kind the sync applied, those held
	// says were held.
	Releases(list client.ObjectList, held func(client.Object) bool) (obj client.Object, pred predicate.Predicate, fn handler.MapFunc)
}

// pyjobsHeld counts the reconciles of new PyJobs held back while their
// sync applied them.
var pyjobsHeld = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "trainops_pyjob_reconciles_held_total",
	Help: "Reconciles of new PyJobs held back while the sync that applied them was still applying its revision (see SyncHold).",
})

func init() { metrics.Registry.MustRegister(pyjobsHeld) }
