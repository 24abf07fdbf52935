// SPDX-License-Identifier: Apache-2.0

package children

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// SyncHold holds back the first reconcile of a sync's own new PyJobs,
// SREAgents and ClusterPolicies while that sync is still applying the
// revision they came from: a revision of thousands of objects is applied
// first, then their children are created, rather than both sharing the
// API server at once. Only the objects of a sync that says, in its
// status, that it is applying are held, and each at most for the wait
// Held gives; nothing else waits (another team's objects, a sync's later
// edits, any object of a sync that is done). The GitSync reconciler
// provides it (internal/gitsync); the workload reconcilers know nothing
// else of syncs.
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

// reconcilesHeld counts the first reconciles held back while the sync
// that applied the object was still applying its revision, by kind.
var reconcilesHeld = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "trainops_reconciles_held_total",
	Help: "First reconciles of new objects held back while the sync that applied them was still applying its revision (see SyncHold), by kind.",
}, []string{"kind"})

func init() { metrics.Registry.MustRegister(reconcilesHeld) }

// HeldNew reports whether obj, new (never reconciled), is held by the
// sync that applied it (see SyncHold), and when to look at it again at
// the latest: its sync's status change queues it sooner (WatchReleases).
// Nothing is held without a Hold.
func (d Deps) HeldNew(ctx context.Context, obj client.Object) (ctrl.Result, bool) {
	if d.Hold == nil {
		return ctrl.Result{}, false
	}
	wait, held := d.Hold.Held(ctx, obj)
	if !held {
		return ctrl.Result{}, false
	}
	kind := "unknown"
	if gvk, err := apiutil.GVKForObject(obj, d.Scheme()); err == nil {
		kind = gvk.Kind
	}
	reconcilesHeld.WithLabelValues(kind).Inc()
	return ctrl.Result{RequeueAfter: wait}, true
}

// WatchReleases adds to b the watch that queues the objects of list's
// kind that isNew says were held, once their sync is done; wrap (nil:
// none) wraps its handler, as the PyJob queue's fairness does. Without a
// Hold it adds nothing.
func (d Deps) WatchReleases(b *ctrlbuilder.Builder, list client.ObjectList, isNew func(client.Object) bool, wrap func(handler.EventHandler) handler.EventHandler) *ctrlbuilder.Builder {
	if d.Hold == nil {
		return b
	}
	obj, pred, fn := d.Hold.Releases(list, isNew)
	h := handler.EnqueueRequestsFromMapFunc(fn)
	if wrap != nil {
		h = wrap(h)
	}
	return b.Watches(obj, h, ctrlbuilder.WithPredicates(pred))
}
