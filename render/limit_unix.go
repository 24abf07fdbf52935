// SPDX-License-Identifier: Apache-2.0

//go:build unix

package render

import (
	"os"
	"syscall"
)

// setDataLimit caps the process's data segment, which holds the Go heap:
// past it an allocation fails and the runtime exits with "out of memory".
func setDataLimit(limit int64) {
	_ = syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: uint64(limit), Max: uint64(limit)})
}

// nearMemoryCap reports whether a child that failed had used at least half
// its memory cap: at the cap, the Go runtime's failing allocations can
// also end it with a segmentation fault rather than its out-of-memory
// message.
func nearMemoryCap(ps *os.ProcessState, limit int64) bool {
	if ps == nil || limit <= 0 {
		return false
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	return ok && ru.Maxrss*1024 >= limit/2
}
