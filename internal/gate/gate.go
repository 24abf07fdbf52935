// SPDX-License-Identifier: Apache-2.0

// Package gate lets the sync engine hold the reconcilers back while it
// applies a large revision.
//
// A cold sync of a thousand PyJobs and the reconcilers creating their Jobs
// compete for the same API server. Letting the revision land first, then
// creating the children, gets both done sooner than interleaving them: the
// apply runs at the API server's full speed and the reconcilers start on a
// complete, settled set of objects. A held reconcile does not wait: it
// parks a wake-up with the gate and returns, so it occupies no worker, and
// the gate runs the wake-ups when it opens. The hold is bounded, so a sync
// stuck on an unreachable API server cannot stop the reconcilers for long.
package gate

import (
	"sync"
	"time"
)

// Gate is open unless a sync holds it. The zero value is open; a nil *Gate
// never holds anyone back.
type Gate struct {
	// MaxHold bounds how long a hold holds anyone back (default
	// DefaultMaxHold).
	MaxHold time.Duration

	mu     sync.Mutex
	holds  int
	since  time.Time   // when the gate closed
	parked []func()    // wake-ups to run when it opens
	expiry *time.Timer // runs the wake-ups when MaxHold ends the hold
}

// DefaultMaxHold is how long a hold holds anyone back at most.
const DefaultMaxHold = 2 * time.Minute

// Hold closes the gate until release is called (once; later calls do
// nothing).
func (g *Gate) Hold() (release func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	if g.holds == 0 {
		g.since = time.Now()
	}
	g.holds++
	g.mu.Unlock()
	var once sync.Once
	return func() { once.Do(g.release) }
}

func (g *Gate) release() {
	g.mu.Lock()
	g.holds--
	var wake []func()
	if g.holds == 0 {
		wake = g.unpark()
	}
	g.mu.Unlock()
	run(wake)
}

// expire runs the wake-ups once MaxHold has ended the hold.
func (g *Gate) expire() {
	g.mu.Lock()
	var wake []func()
	if g.left() == 0 {
		wake = g.unpark()
	}
	g.mu.Unlock()
	run(wake)
}

// unpark takes the parked wake-ups and stops the expiry timer. g.mu is
// held.
func (g *Gate) unpark() []func() {
	wake := g.parked
	g.parked = nil
	if g.expiry != nil {
		g.expiry.Stop()
		g.expiry = nil
	}
	return wake
}

// run runs wake-ups in order, off the caller's goroutine: a wake-up may
// block until its controller takes the event.
func run(wake []func()) {
	if len(wake) > 0 {
		go func() {
			for _, w := range wake {
				w()
			}
		}()
	}
}

// left is how long the current hold still holds anyone back; 0 when the
// gate is open or the hold has lasted MaxHold. g.mu is held.
func (g *Gate) left() time.Duration {
	if g.holds == 0 {
		return 0
	}
	maxHold := g.MaxHold
	if maxHold <= 0 {
		maxHold = DefaultMaxHold
	}
	return max(0, maxHold-time.Since(g.since))
}

// Held reports whether the gate holds reconciles back: it is held, for
// less than MaxHold so far.
func (g *Gate) Held() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.left() > 0
}

// Park registers wake to run once the gate opens, or once MaxHold ends
// the hold, and reports true: the caller returns without waiting. It
// registers nothing and reports false when the gate holds no one back:
// the caller goes ahead.
func (g *Gate) Park(wake func()) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	left := g.left()
	if left == 0 {
		return false
	}
	g.parked = append(g.parked, wake)
	if g.expiry == nil {
		g.expiry = time.AfterFunc(left, g.expire)
	}
	return true
}
