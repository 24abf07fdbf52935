// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// fairness orders a reconciler's queue by namespace: each event enqueued
// for a namespace within burstWindow of its previous one comes one
// priority step below it. A namespace whose sync lands thousands of
// objects at once has them reconciled in the order they came, and a lone
// object of another namespace goes before all but the first of them: no
// team's work waits for another team's burst. It only orders the queue:
// a reconcile needs nothing of it, and a restart loses nothing.
type fairness struct {
	mu     sync.Mutex
	bursts map[string]burst
}

// burst is a namespace's run of events, each within burstWindow of the
// last.
type burst struct {
	n    int
	last time.Time
}

const (
	// burstWindow is how long after its last event a namespace's burst
	// ends, and its next event is queued at the top again.
	burstWindow = 5 * time.Second
	// lowestFair bounds how far a burst sinks.
	lowestFair = 1 << 20
)

// priority counts an event for ns and returns its queue priority: zero
// for the first of a burst, one lower for each that follows.
func (f *fairness) priority(ns string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if f.bursts == nil {
		f.bursts = map[string]burst{}
	}
	b := f.bursts[ns]
	if now.Sub(b.last) > burstWindow {
		b.n = 0
	}
	p := -min(b.n, lowestFair)
	b.n++
	b.last = now
	f.bursts[ns] = b
	if len(f.bursts) > 1024 {
		for k, v := range f.bursts {
			if now.Sub(v.last) > burstWindow {
				delete(f.bursts, k)
			}
		}
	}
	return p
}

// handler wraps inner so that what it enqueues is queued fairly.
func (f *fairness) handler(inner handler.EventHandler) handler.EventHandler {
	return fairHandler{inner: inner, f: f}
}

type fairHandler struct {
	inner handler.EventHandler
	f     *fairness
}

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

func (h fairHandler) wrap(q queue) queue {
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		return fairQueue{PriorityQueue: pq, f: h.f}
	}
	return q
}

func (h fairHandler) Create(ctx context.Context, e event.TypedCreateEvent[client.Object], q queue) {
	h.inner.Create(ctx, e, h.wrap(q))
}

func (h fairHandler) Update(ctx context.Context, e event.TypedUpdateEvent[client.Object], q queue) {
	h.inner.Update(ctx, e, h.wrap(q))
}

func (h fairHandler) Delete(ctx context.Context, e event.TypedDeleteEvent[client.Object], q queue) {
	h.inner.Delete(ctx, e, h.wrap(q))
}

func (h fairHandler) Generic(ctx context.Context, e event.TypedGenericEvent[client.Object], q queue) {
	h.inner.Generic(ctx, e, h.wrap(q))
}

// fairQueue lowers the priority of each request added to the level its
// namespace's burst has reached (never raises one).
type fairQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	f *fairness
}

func (q fairQueue) Add(item reconcile.Request) { q.AddWithOpts(priorityqueue.AddOpts{}, item) }

func (q fairQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	for _, item := range items {
		p := q.f.priority(item.Namespace)
		opts := o
		if opts.Priority == nil || *opts.Priority > p {
			opts.Priority = &p
		}
		q.PriorityQueue.AddWithOpts(opts, item)
	}
}
