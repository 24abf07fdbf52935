package par

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestEachCallsEveryIndexOnce checks every index is called exactly once,
// for no work, less work than cores and much more.
func TestEachCallsEveryIndexOnce(t *testing.T) {
	for _, n := range []int{0, 1, runtime.GOMAXPROCS(0) + 1, 1000} {
		calls := make([]atomic.Int32, n)
		Each(n, func(i int) { calls[i].Add(1) })
		for i := range calls {
			if c := calls[i].Load(); c != 1 {
				t.Fatalf("n=%d: index %d called %d times, want 1", n, i, c)
			}
		}
	}
}

// TestEachRunsConcurrently checks the calls overlap when there are cores
// for it: with two or more, a call waits for another to start.
func TestEachRunsConcurrently(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	started := make(chan struct{})
	var once atomic.Bool
	Each(2, func(i int) {
		if once.CompareAndSwap(false, true) {
			// Returns once the other call has begun: never, were the
			// calls made one after another.
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Error("the second call did not start while the first ran")
			}
			return
		}
		close(started)
	})
}
