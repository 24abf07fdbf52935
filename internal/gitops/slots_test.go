// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"errors"
	"testing"
	"time"
)

// acquireAsync asks for a slot in the background; the channel gives the
// release function once granted.
func acquireAsync(ctx context.Context, t *Ticket) <-chan func() {
	out := make(chan func(), 1)
	go func() {
		if release, err := t.Acquire(ctx); err == nil {
			out <- release
		}
	}()
	return out
}

// waitWaiting waits until n requests wait in s.
func waitWaiting(t *testing.T, s *Slots, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		got := len(s.waiting)
		s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests waiting, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func granted(t *testing.T, ch <-chan func(), what string) func() {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no slot", what)
		return nil
	}
}

func notGranted(t *testing.T, ch <-chan func(), what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s got a slot it should wait for", what)
	default:
	}
}

func TestSlotsGoToTheSyncWithNothingInFlightThenTheFewestLeft(t *testing.T) {
	ctx := context.Background()
	s := NewSlots(3)
	big, small := s.Join(100), s.Join(3)
	b1 := granted(t, acquireAsync(ctx, big), "big's first")
	b2 := granted(t, acquireAsync(ctx, big), "big's second")
	b3 := granted(t, acquireAsync(ctx, big), "big's third")
	// The pool is full: big's fourth and small's first wait.
	bigCh := acquireAsync(ctx, big)
	waitWaiting(t, s, 1)
	smallCh := acquireAsync(ctx, small)
	waitWaiting(t, s, 2)
	b1()
	// small has nothing in flight: it goes first, though big asked first.
	s1 := granted(t, smallCh, "small's first")
	notGranted(t, bigCh, "big's fourth")
	smallCh = acquireAsync(ctx, small)
	waitWaiting(t, s, 2)
	b2()
	// Both have requests in flight; small has fewer left.
	s2 := granted(t, smallCh, "small's second")
	notGranted(t, bigCh, "big's fourth")
	s1()
	// The slot small gave back goes to the only request waiting.
	b4 := granted(t, bigCh, "big's fourth")
	for _, r := range []func(){s2, b3, b4} {
		r()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free != 3 || len(s.waiting) != 0 || big.inflight != 0 || small.inflight != 0 {
		t.Fatalf("after every release: %d free, %d waiting, %d and %d in flight; want 3, 0, 0, 0", s.free, len(s.waiting), big.inflight, small.inflight)
	}
}

func TestSlotsEqualSyncsGoInJoinOrder(t *testing.T) {
	ctx := context.Background()
	s := NewSlots(1)
	first, second, other := s.Join(5), s.Join(5), s.Join(100)
	r := granted(t, acquireAsync(ctx, other), "other's first")
	// second asks before first; both have nothing in flight and as many
	// requests left.
	secondCh := acquireAsync(ctx, second)
	waitWaiting(t, s, 1)
	firstCh := acquireAsync(ctx, first)
	waitWaiting(t, s, 2)
	r()
	r = granted(t, firstCh, "first's first")
	notGranted(t, secondCh, "second's first")
	r()
	granted(t, secondCh, "second's first")()
}

func TestSlotsACancelledWaitGivesNothingAway(t *testing.T) {
	s := NewSlots(1)
	tk := s.Join(2)
	r := granted(t, acquireAsync(context.Background(), tk), "first")
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := tk.Acquire(ctx)
		errc <- err
	}()
	waitWaiting(t, s, 1)
	stop := errors.New("sync cancelled")
	cancel(stop)
	if err := <-errc; !errors.Is(err, stop) {
		t.Fatalf("cancelled wait: %v, want %v", err, stop)
	}
	r()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free != 1 || len(s.waiting) != 0 || tk.inflight != 0 {
		t.Fatalf("after a cancelled wait: %d free, %d waiting, %d in flight; want 1, 0, 0", s.free, len(s.waiting), tk.inflight)
	}
}

func TestNilSlotsNeverWait(t *testing.T) {
	var s *Slots
	tk := s.Join(10)
	for range 100 {
		r, err := tk.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer r()
	}
}

func TestBackgroundWritesGoAtOnceWithoutASync(t *testing.T) {
	s := NewSlots(1)
	bg := s.Background()
	// More writes than slots, none waiting: no sync is in progress.
	for range 3 {
		r := granted(t, acquireAsync(context.Background(), bg), "a write with no sync")
		defer r()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free != 1 || bg.inflight != 0 {
		t.Fatalf("writes without a sync took slots: %d free, %d in flight; want 1, 0", s.free, bg.inflight)
	}
}

func TestBackgroundWritesYieldToSyncsButMove(t *testing.T) {
	ctx := context.Background()
	s := NewSlots(2)
	bg := s.Background()
	sync := s.Join(10)
	a1 := granted(t, acquireAsync(ctx, sync), "the sync's first")
	a2 := granted(t, acquireAsync(ctx, sync), "the sync's second")
	// The pool is full: a write of the reconcilers waits, though no sync
	// request waits before it.
	bgCh := acquireAsync(ctx, bg)
	waitWaiting(t, s, 1)
	syncCh := acquireAsync(ctx, sync)
	waitWaiting(t, s, 2)
	a1()
	// Nothing of theirs in flight: the reconcilers' write goes first.
	w1 := granted(t, bgCh, "the reconcilers' first")
	notGranted(t, syncCh, "the sync's third")
	bgCh = acquireAsync(ctx, bg)
	waitWaiting(t, s, 2)
	a2()
	// Both have one in flight: the sync goes first.
	a3 := granted(t, syncCh, "the sync's third")
	notGranted(t, bgCh, "the reconcilers' second")
	// The slot the sync gives back goes to the reconcilers' write.
	a3()
	sync.Done()
	granted(t, bgCh, "the reconcilers' second")()
	w1()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free != 2 || len(s.waiting) != 0 || bg.inflight != 0 {
		t.Fatalf("after the sync: %d free, %d waiting, %d in flight; want 2, 0, 0", s.free, len(s.waiting), bg.inflight)
	}
}

func TestBackgroundWritesGoOnceTheLastSyncIsDone(t *testing.T) {
	ctx := context.Background()
	s := NewSlots(1)
	bg := s.Background()
	sync := s.Join(10)
	w1 := granted(t, acquireAsync(ctx, bg), "the reconcilers' first")
	// The pool is full with the reconcilers' own write.
	bgCh := acquireAsync(ctx, bg)
	waitWaiting(t, s, 1)
	notGranted(t, bgCh, "the reconcilers' second, a sync in progress")
	sync.Done()
	w2 := granted(t, bgCh, "the reconcilers' second, no sync left")
	w2()
	w1()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free != 1 || bg.inflight != 0 {
		t.Fatalf("after the writes: %d free, %d in flight; want 1, 0", s.free, bg.inflight)
	}
}
