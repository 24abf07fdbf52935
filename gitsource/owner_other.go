// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package gitsource

// privateDir cannot check ownership here; ScratchDir finds no /dev/shm on
// these systems anyway, so revision files stay in the cache folder.
func privateDir(string) bool { return false }
