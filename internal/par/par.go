// Package par runs independent pieces of CPU-bound work on every core.
package par

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Each calls fn(i) for every i in [0, n), from as many goroutines as there
// are cores (GOMAXPROCS), and returns once every call has. Each i is taken
// once; fn must be safe to call concurrently, and writes its result by i
// (to the i-th element of a slice, say) so results keep their order.
func Each(n int, fn func(i int)) {
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		}()
	}
	wg.Wait()
}
