// Package gcfloor keeps the garbage collector's heap goal from falling
// below a floor.
//
// With the default GOGC=100, a process whose live heap is small collects
// every time it allocates as much again: rendering and validating even a
// small revision would start several collections, each marking the whole
// heap on cores the API server shares. A floor of some tens of MiB lets
// such a sync run without a collection, and costs nothing once the live
// heap is half the floor or more: the goal is then what GOGC=100 makes it
// (figures in docs/performance.md).
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// DefaultFloor is the heap goal `trainops run` keeps at least.
const DefaultFloor = 64 << 20

// liveHeap is the runtime metric of the heap the last collection marked
// live.
const liveHeap = "/gc/heap/live:bytes"

// Start keeps the heap goal at floor bytes or more, by raising the GC
// percentage after each collection while the live heap is below floor/2,
// and returns a function that stops doing so and restores GOGC=100. It does
// nothing (and returns a no-op) when the GOGC environment variable is set:
// an operator's own setting wins. A memory limit (GOMEMLIMIT) still bounds
// the heap.
func Start(floor uint64) (stop func()) {
	if os.Getenv("GOGC") != "" || floor == 0 {
		return func() {}
	}
	var stopped atomic.Bool
	sample := []metrics.Sample{{Name: liveHeap}}
	// A finalizer runs after each collection that finds its object
	// unreachable; setting it again on a new object arms the next one.
	var arm func()
	arm = func() {
		runtime.SetFinalizer(new(sentinel), func(*sentinel) {
			if stopped.Load() {
				return
			}
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 {
				debug.SetGCPercent(Percent(sample[0].Value.Uint64(), floor))
			}
			arm()
		})
	}
	arm()
	return func() {
		stopped.Store(true)
		debug.SetGCPercent(100)
	}
}

// sentinel is a heap object whose finalizer marks each collection. It is
// not zero-sized: the runtime may not allocate those on the heap.
type sentinel struct{ _ [16]byte }

// maxPercent bounds the percentage: a goal of 101 times the live heap.
const maxPercent = 10000

// Percent is the GC percentage that makes the heap goal
// live*(1+percent/100) at least floor, never below 100 and at most
// maxPercent.
func Percent(live, floor uint64) int {
	if live*2 >= floor {
		return 100
	}
	if live == 0 || floor/live >= maxPercent/100+1 {
		return maxPercent
	}
	return int(floor*100/live) - 100
}
