// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPackagesImportOnlyWhatTheirConcernNeeds: each workload package
// (one per concern) builds on the shared packages (children, gpustack,
// status) and on no other workload package, nothing of GitOps and nothing
// of test support; the shared packages build on no workload package; the
// GitSync reconciler builds on nothing of the workload reconcilers (it
// writes status through internal/status). `go list -deps`, tests left out.
func TestPackagesImportOnlyWhatTheirConcernNeeds(t *testing.T) {
	const m = "github.com/trainops/trainops/"
	const c = m + "internal/controller/"
	workloads := []string{c + "pyjob", c + "sreagent", c + "clusterpolicy", c + "remediation", c + "driverupgrade"}
	gitops := []string{m + "internal/gitops", m + "gitsource", m + "render", m + "internal/gitsync", m + "internal/gitserver"}
	testSupport := []string{m + "internal/testenv", m + "internal/testenv/ctrltest", m + "internal/testenv/gpustacktest"}
	forbidden := map[string][]string{
		c + "children":            append(append(append([]string{}, workloads...), gitops...), testSupport...),
		c + "gpustack":            append(append(append([]string{}, workloads...), gitops...), testSupport...),
		m + "internal/status":     {m + "internal/controller", c + "children", m + "internal/gitsync", m + "internal/gitops", m + "internal/testenv"},
		m + "internal/gitsync":    {m + "internal/controller", c + "children", c + "pyjob", m + "internal/testenv", m + "internal/gitserver"},
		m + "internal/workload":   {m + "internal/controller", c + "children", m + "internal/gitops", m + "internal/testenv"},
		m + "internal/controller": append(append([]string{}, gitops...), testSupport...),
		// render links kustomize and with it Go's plugin package, which
		// makes a cgo test binary resolve every symbol at start: the
		// GPU parity tests' NVML mock would not load.
		m + "internal/testenv": {m + "render"},
	}
	for _, w := range workloads {
		var bad []string
		for _, other := range workloads {
			if other != w {
				bad = append(bad, other)
			}
		}
		forbidden[w] = append(append(bad, gitops...), testSupport...)
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
