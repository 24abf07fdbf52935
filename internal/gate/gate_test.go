package gate

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestNilAndOpenGatesDoNotWait(t *testing.T) {
	var nilGate *Gate
	if err := nilGate.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	nilGate.Hold()()
	if nilGate.Held() {
		t.Fatal("a nil gate is held")
	}
	g := &Gate{}
	if err := g.Wait(context.Background()); err != nil || g.Held() {
		t.Fatalf("open gate: err %v, held %v", err, g.Held())
	}
}

func TestWaitReturnsWhenEveryHoldIsReleased(t *testing.T) {
	g := &Gate{MaxHold: time.Minute}
	r1, r2 := g.Hold(), g.Hold()
	var passed atomic.Bool
	done := make(chan struct{})
	go func() {
		_ = g.Wait(context.Background())
		passed.Store(true)
		close(done)
	}()
	r1()
	r1() // a second release of the same hold does nothing
	time.Sleep(50 * time.Millisecond)
	if passed.Load() || !g.Held() {
		t.Fatal("the gate opened with a hold left")
	}
	r2()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after the last release")
	}
	if g.Held() {
		t.Fatal("still held")
	}
	// Held again after opening: a new hold closes it anew.
	r3 := g.Hold()
	defer r3()
	if !g.Held() {
		t.Fatal("a new hold did not close the gate")
	}
}

func TestWaitIsBounded(t *testing.T) {
	g := &Gate{MaxHold: 50 * time.Millisecond}
	defer g.Hold()()
	start := time.Now()
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("returned after %s, before MaxHold", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g.MaxHold = time.Hour
	if err := g.Wait(ctx); err == nil {
		t.Fatal("Wait ignored a cancelled context")
	}
}
