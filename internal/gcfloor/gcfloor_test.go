package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, floor uint64
		want        int
	}{
		{live: 12 * mib, floor: 64 * mib, want: 433}, // goal 64 MiB
		{live: 16 * mib, floor: 64 * mib, want: 300},
		{live: 32 * mib, floor: 64 * mib, want: 100}, // GOGC=100 reaches it
		{live: 200 * mib, floor: 64 * mib, want: 100},
		{live: 0, floor: 64 * mib, want: maxPercent},
		{live: 100 << 10, floor: 64 * mib, want: maxPercent}, // bounded
		{live: 1 * mib, floor: 64 * mib, want: 6300},
	} {
		if got := Percent(c.live, c.floor); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", c.live/mib, c.floor/mib, got, c.want)
		}
		if c.live > 0 && c.live*2 < c.floor && c.want < maxPercent {
			if goal := c.live + c.live*uint64(c.want)/100; goal+c.live/100 < c.floor {
				t.Errorf("live %d MiB: goal %d below the floor %d", c.live/mib, goal, c.floor)
			}
		}
	}
}

// gcPercent reads the current GC percentage.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestStartRaisesAndStops runs the real runtime: after a collection with a
// small live heap the percentage is raised to reach the floor, and stop
// puts GOGC=100 back.
func TestStartRaisesAndStops(t *testing.T) {
	if os.Getenv("GOGC") != "" {
		// The operator's setting wins: the package leaves it alone.
		before := gcPercent()
		stop := Start(1 << 40)
		defer stop()
		runtime.GC()
		time.Sleep(50 * time.Millisecond)
		if p := gcPercent(); p != before {
			t.Fatalf("GOGC is set, yet the percentage changed from %d to %d", before, p)
		}
		return
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	stop := Start(1 << 40) // far above any test's live heap
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() <= 100 {
		if time.Now().After(deadline) {
			t.Fatal("the GC percentage was not raised after collections")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if p := gcPercent(); p != 100 {
		t.Fatalf("after stop the GC percentage is %d, want 100", p)
	}
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	if p := gcPercent(); p != 100 {
		t.Fatalf("a collection after stop changed the percentage to %d", p)
	}
}
