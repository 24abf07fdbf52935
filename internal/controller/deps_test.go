// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"os/exec"
	"strings"
	"testing"
)

// TestWorkloadReconcilersImportNothingOfGitOps: the PyJob, SREAgent and
// ClusterPolicy reconcilers build without the sync engine, the Git fetch
// or the render (the GitSync reconciler, in internal/gitsync, has them).
func TestWorkloadReconcilersImportNothingOfGitOps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps gave %d packages: %q", len(deps), out)
	}
	for _, d := range deps {
		switch d {
		case "github.com/trainops/trainops/internal/gitops", "github.com/trainops/trainops/gitsource", "github.com/trainops/trainops/render":
			t.Errorf("internal/controller depends on %s", d)
		}
	}
}
