// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"math"
	"sync"
)

// Slots shares one process's API writes among its syncs in progress and
// its reconcilers: at most the pool's size in flight while any sync
// applies, whatever the number of syncs. A free slot goes first to a sync
// (or the reconcilers) with no request in flight, so each moves; then to
// the sync with the fewest requests left, so syncs finish one after
// another rather than all at the end together; the reconcilers' writes
// (Background) come last. A small team's sync thus never waits for a large
// one's to end, the syncs that follow one that finished fetch and render
// while the others apply (the API server kept busy, not idle while a
// batch of syncs prepares at once), and the children of the objects
// already applied are made in what the applies leave, one write at a time
// at least, every write at once when no sync applies
// (docs/design.md, "One pool of writes").
type Slots struct {
	mu      sync.Mutex
	free    int
	joined  uint64
	syncs   int // sync tickets joined and not done
	waiting []*slotWaiter
}

// slotWaiter is one request waiting for a slot; ready is closed when it
// may go, slotted saying whether it took a slot (no sync left: it goes
// without one).
type slotWaiter struct {
	t       *Ticket
	ready   chan struct{}
	slotted bool
}

// NewSlots makes a pool of n slots (at least one).
func NewSlots(n int) *Slots { return &Slots{free: max(n, 1)} }

// Ticket is one sync's place in the pool, or the reconcilers'.
type Ticket struct {
	s        *Slots
	order    uint64 // join order: the earlier goes first among equals
	left     int    // requests the sync still expects to make
	inflight int
	// background: the reconcilers' writes, which take a slot only while
	// a sync is in progress.
	background bool
}

// Join enters a sync expecting to make left requests; Done ends it. A
// nil pool gives a nil ticket, whose Acquire never waits.
func (s *Slots) Join(left int) *Ticket {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.joined++
	s.syncs++
	return &Ticket{s: s, order: s.joined, left: left}
}

// Background is the reconcilers' place in the pool: their writes go at
// once while no sync is in progress, and otherwise after the syncs', at
// least one at a time.
func (s *Slots) Background() *Ticket {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.joined++
	return &Ticket{s: s, order: s.joined, left: math.MaxInt, background: true}
}

// Done ends t's sync. With no sync left, the reconcilers' waiting writes
// go at once.
func (t *Ticket) Done() {
	if t == nil || t.background {
		return
	}
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.syncs--; s.syncs > 0 {
		return
	}
	for _, w := range s.waiting {
		close(w.ready)
	}
	s.waiting = nil
}

// Acquire waits for a slot for one request of t's sync, and returns the
// function that gives it back; it fails only when ctx ends first.
func (t *Ticket) Acquire(ctx context.Context) (release func(), err error) {
	if t == nil {
		return func() {}, nil
	}
	s := t.s
	w := &slotWaiter{t: t, ready: make(chan struct{})}
	s.mu.Lock()
	if t.background && s.syncs == 0 {
		s.mu.Unlock()
		return func() {}, nil
	}
	s.waiting = append(s.waiting, w)
	s.dispatch()
	s.mu.Unlock()
	select {
	case <-w.ready:
		if !w.slotted {
			return func() {}, nil
		}
		return t.release, nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, o := range s.waiting {
			if o == w {
				s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
				return nil, context.Cause(ctx)
			}
		}
		if w.slotted {
			// Granted meanwhile: give it back.
			s.free++
			t.inflight--
			s.dispatch()
		}
		return nil, context.Cause(ctx)
	}
}

func (t *Ticket) release() {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free++
	t.inflight--
	s.dispatch()
}

// dispatch hands free slots to the waiting requests that go first (see
// Slots). Under s.mu.
func (s *Slots) dispatch() {
	for s.free > 0 && len(s.waiting) > 0 {
		best := 0
		for i, w := range s.waiting[1:] {
			if w.t.before(s.waiting[best].t) {
				best = i + 1
			}
		}
		w := s.waiting[best]
		s.waiting = append(s.waiting[:best], s.waiting[best+1:]...)
		s.free--
		w.t.inflight++
		w.t.left = max(w.t.left-1, 0)
		w.slotted = true
		close(w.ready)
	}
}

// before says t's waiting request goes before o's: a sync with nothing in
// flight first, then the one with the fewest requests left, then the one
// that joined first.
func (t *Ticket) before(o *Ticket) bool {
	if (t.inflight == 0) != (o.inflight == 0) {
		return t.inflight == 0
	}
	if t.left != o.left {
		return t.left < o.left
	}
	return t.order < o.order
}
