// SPDX-License-Identifier: Apache-2.0

// Package procmem reads this process's memory from /proc, for tests that
// bound what a bad input may make trainops take.
package procmem

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

// KiB is a field of /proc/self/status (VmRSS, VmHWM …), in KiB.
func KiB(field string) (int, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var n int
			if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &n); err != nil {
				return 0, fmt.Errorf("%s: %w", field, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/self/status", field)
}

// ResetPeak collects garbage, returns it to the system, and makes the peak
// (VmHWM) the current resident size.
func ResetPeak() error {
	runtime.GC()
	debug.FreeOSMemory()
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// PeakGrowthKiB runs f and returns how far the peak resident size rose
// above the resident size before it.
func PeakGrowthKiB(f func()) (int, error) {
	if err := ResetPeak(); err != nil {
		return 0, err
	}
	before, err := KiB("VmRSS")
	if err != nil {
		return 0, err
	}
	f()
	peak, err := KiB("VmHWM")
	return peak - before, err
}
