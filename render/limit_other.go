// SPDX-License-Identifier: Apache-2.0

//go:build !unix

package render

import "os"

// setDataLimit has no system cap here; the heap goal set by capMemory and
// the render's deadline still apply.
func setDataLimit(int64) {}

// nearMemoryCap cannot tell here: only the child's own message says it
// ran out of memory.
func nearMemoryCap(*os.ProcessState, int64) bool { return false }
