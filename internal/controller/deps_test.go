// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"os/exec"
	"strings"
	"testing"
)

// TestWorkloadReconcilersImportNothingOfGitOps: the workload reconcilers
// and the status package build on nothing of GitOps or of test support,
// and the GitSync reconciler nothing of the workload reconcilers (it
// writes status through internal/status): `go list -deps`, tests left
// out.
func TestWorkloadReconcilersImportNothingOfGitOps(t *testing.T) {
	const m = "github.com/trainops/trainops/"
	forbidden := map[string][]string{
		m + "internal/controller": {m + "internal/gitops", m + "gitsource", m + "render", m + "internal/gitsync", m + "internal/testenv", m + "internal/gitserver"},
		m + "internal/status":     {m + "internal/controller", m + "internal/gitsync", m + "internal/gitops", m + "internal/testenv"},
		m + "internal/gitsync":    {m + "internal/controller", m + "internal/testenv", m + "internal/gitserver"},
		m + "internal/workload":   {m + "internal/controller", m + "internal/gitops", m + "internal/testenv"},
		// render links kustomize and with it Go's plugin package, which
		// makes a cgo test binary resolve every symbol at start: the
		// GPU parity tests' NVML mock would not load.
		m + "internal/testenv": {m + "render"},
	}
	for pkg, bad := range forbidden {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatal(err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s gave %d packages: %q", pkg, len(deps), out)
		}
		for _, d := range deps {
			for _, b := range bad {
				if d == b {
					t.Errorf("%s depends on %s", pkg, d)
				}
			}
		}
	}
}
