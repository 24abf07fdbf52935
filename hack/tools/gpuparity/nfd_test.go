// SPDX-License-Identifier: Apache-2.0

package gpuparity

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

// TestGPUNodesFoundByUpstreamLabels: trainops finds GPU nodes by exactly
// the Node Feature Discovery labels the GPU Operator's state manager does
// (gpuNodeLabels), and the simulated GPU nodes carry one a stock NFD sets.
func TestGPUNodesFoundByUpstreamLabels(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(upstream(t), "controllers", "state_manager.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var upstreamLabels []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "gpuNodeLabels" || len(vs.Values) != 1 {
			return true
		}
		for _, e := range vs.Values[0].(*ast.CompositeLit).Elts {
			k, _ := strconv.Unquote(e.(*ast.KeyValueExpr).Key.(*ast.BasicLit).Value)
			upstreamLabels = append(upstreamLabels, k)
		}
		return false
	})
	if len(upstreamLabels) == 0 {
		t.Fatal("no gpuNodeLabels in the GPU Operator's state_manager.go: its code changed")
	}
	ours := slices.Clone(builder.NFDNVIDIALabels)
	slices.Sort(ours)
	slices.Sort(upstreamLabels)
	if !slices.Equal(ours, upstreamLabels) {
		t.Errorf("trainops finds GPU nodes by %v, the GPU Operator by %v", ours, upstreamLabels)
	}
	if !slices.Contains(upstreamLabels, testenv.GPUNodeLabel) || testenv.GPUNodeLabel == "feature.node.kubernetes.io/pci-10de.present" {
		t.Errorf("simulated GPU nodes carry %s, not a label a stock NFD sets (class and vendor)", testenv.GPUNodeLabel)
	}
}
