//go:build unix

package render

import "syscall"

// setDataLimit caps the process's data segment, which holds the Go heap:
// past it an allocation fails and the runtime exits with "out of memory".
func setDataLimit(limit int64) {
	_ = syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: uint64(limit), Max: uint64(limit)})
}
