// Package gate lets the sync engine hold the reconcilers back while it
// applies a large revision.
//
// A cold sync of a thousand PyJobs and the reconcilers creating their Jobs
// compete for the same API server. Letting the revision land first, then
// creating the children, gets both done sooner than interleaving them: the
// apply runs at the API server's full speed and the reconcilers start on a
// complete, settled set of objects. The hold is bounded, so a sync stuck on
// an unreachable API server cannot stop the reconcilers for long.
package gate

import (
	"context"
	"sync"
	"time"
)

// Gate is open unless a sync holds it. The zero value is open; a nil *Gate
// never holds anyone back.
type Gate struct {
	// MaxHold bounds how long Wait waits (default DefaultMaxHold).
	MaxHold time.Duration

	mu     sync.Mutex
	holds  int
	opened chan struct{} // closed when the last hold is released
}

// DefaultMaxHold is how long a reconciler waits at most for a held gate.
const DefaultMaxHold = 2 * time.Minute

// Hold closes the gate until release is called (once; later calls do
// nothing).
func (g *Gate) Hold() (release func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	if g.holds == 0 {
		g.opened = make(chan struct{})
	}
	g.holds++
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.holds--
			if g.holds == 0 {
				close(g.opened)
			}
		})
	}
}

// Held reports whether the gate is held.
func (g *Gate) Held() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holds > 0
}

// Wait returns when the gate is open, when MaxHold has passed, or with
// ctx's error when ctx ends first.
func (g *Gate) Wait(ctx context.Context) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	opened, held := g.opened, g.holds > 0
	g.mu.Unlock()
	if !held {
		return nil
	}
	maxHold := g.MaxHold
	if maxHold <= 0 {
		maxHold = DefaultMaxHold
	}
	t := time.NewTimer(maxHold)
	defer t.Stop()
	select {
	case <-opened:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
