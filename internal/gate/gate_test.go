// SPDX-License-Identifier: Apache-2.0

package gate

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestNilAndOpenGatesHoldNoOne(t *testing.T) {
	var nilGate *Gate
	if nilGate.Park(func() { t.Error("woken by a nil gate") }) {
		t.Fatal("a nil gate parks")
	}
	nilGate.Hold()()
	if nilGate.Held() {
		t.Fatal("a nil gate is held")
	}
	g := &Gate{}
	if g.Park(func() { t.Error("woken by an open gate") }) || g.Held() {
		t.Fatalf("open gate parks, or is held (%v)", g.Held())
	}
}

func TestParkedWakeUpsRunWhenEveryHoldIsReleased(t *testing.T) {
	g := &Gate{MaxHold: time.Minute}
	r1, r2 := g.Hold(), g.Hold()
	var woken atomic.Int32
	for range 3 {
		if !g.Park(func() { woken.Add(1) }) {
			t.Fatal("a held gate does not park")
		}
	}
	r1()
	r1() // a second release of the same hold does nothing
	time.Sleep(50 * time.Millisecond)
	if woken.Load() != 0 || !g.Held() {
		t.Fatalf("the gate opened with a hold left: %d woken", woken.Load())
	}
	r2()
	deadline := time.Now().Add(5 * time.Second)
	for woken.Load() != 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if woken.Load() != 3 || g.Held() {
		t.Fatalf("%d of 3 woken, held %v", woken.Load(), g.Held())
	}
	// Held again after opening: a new hold closes it anew, and the
	// wake-ups of the last one do not run twice.
	r3 := g.Hold()
	defer r3()
	if !g.Held() {
		t.Fatal("a new hold did not close the gate")
	}
	time.Sleep(20 * time.Millisecond)
	if woken.Load() != 3 {
		t.Fatalf("%d wake-ups ran, want 3", woken.Load())
	}
}

func TestHoldIsBounded(t *testing.T) {
	g := &Gate{MaxHold: 50 * time.Millisecond}
	defer g.Hold()()
	woken := make(chan struct{})
	if !g.Park(func() { close(woken) }) {
		t.Fatal("a held gate does not park")
	}
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("a parked wake-up did not run when MaxHold ended the hold")
	}
	if g.Held() {
		t.Fatal("still holding after MaxHold")
	}
	if g.Park(func() { t.Error("parked past MaxHold") }) {
		t.Fatal("parks past MaxHold")
	}
}
