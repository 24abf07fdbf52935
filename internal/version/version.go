// SPDX-License-Identifier: Apache-2.0

// Package version holds the build's version, stamped by the linker.
package version

import (
	"fmt"
	"runtime"
)

// Version and Commit are set with -ldflags -X at build time.
var (
	Version = "dev"
	Commit  = "unknown"
)

// String is the one-line version report of `trainops version`.
func String() string {
	return fmt.Sprintf("trainops %s (commit %s, %s, %s/%s)", Version, Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
