// SPDX-License-Identifier: Apache-2.0

//go:build unix

package gitsource

import (
	"os"
	"syscall"
)

// privateDir reports whether path is a real folder (not a symlink) that
// this process's user owns and nobody else may enter: the only kind of
// folder in a shared /dev/shm that trainops writes a revision's files to.
func privateDir(path string) bool {
	info, err := os.Lstat(path)
	if err != nil || !info.IsDir() || info.Mode().Perm()&0o077 != 0 {
		return false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
