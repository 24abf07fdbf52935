// SPDX-License-Identifier: Apache-2.0

package gpuparity

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/trainops/trainops/internal/builder"
)

// transformOf maps the GPU Operator's Transform functions to the
// DaemonSets trainops builds for the same component.
var transformOf = map[string]string{
	"TransformDriver":             ubuntuDriver,
	"TransformToolkit":            builder.ToolkitDaemonSet,
	"TransformValidator":          builder.ValidatorDaemonSet,
	"TransformDevicePlugin":       builder.DevicePluginDaemonSet,
	"TransformGPUDiscoveryPlugin": builder.GFDDaemonSet,
	"TransformDCGMExporter":       builder.DCGMExporterDaemonSet,
	"TransformMIGManager":         builder.MIGManagerDaemonSet,
}

// notDeployed are the GPU Operator's components trainops does not deploy,
// by Transform function, with why.
var notDeployed = map[string]string{
	"TransformMPSControlDaemon": "MPS sharing is not part of trainops's ClusterPolicy (time-slicing is)",
	"TransformDCGM":             "the standalone DCGM host engine: trainops's DCGM exporter embeds its own",
}

// callsIn lists the GPU Operator's functions in controllers/
// object_controls.go whose body calls fn.
func callsIn(t *testing.T, fn string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(upstream(t), "controllers", "object_controls.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		found := false
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				if id, ok := c.Fun.(*ast.Ident); ok && id.Name == fn {
					found = true
				}
			}
			return !found
		})
		if found {
			out = append(out, fd.Name.Name)
		}
	}
	return out
}

// TestRuntimeClassAsUpstream: every component the GPU Operator gives the
// nvidia runtime class (setRuntimeClass) gets it from trainops too on
// containerd, and none on CRI-O, as setRuntimeClass does; no other
// component of trainops's has one.
func TestRuntimeClassAsUpstream(t *testing.T) {
	callers := callsIn(t, "setRuntimeClass")
	if len(callers) == 0 {
		t.Fatal("the GPU Operator calls setRuntimeClass nowhere: its code changed")
	}
	want := map[string]bool{}
	for _, fn := range callers {
		ds, ok := transformOf[fn]
		if !ok {
			if _, skip := notDeployed[fn]; !skip {
				t.Errorf("the GPU Operator's %s sets the runtime class; trainops maps it to no DaemonSet", fn)
			}
			continue
		}
		want[ds] = true
	}
	for _, runtime := range []string{"containerd", "crio"} {
		cp := clusterPolicy(t, "clusterpolicy-mig")
		cp.Spec.ContainerRuntime.Runtime = runtime
		for _, ds := range transformOf {
			got := built[*appsv1.DaemonSet](t, cp, ds).Spec.Template.Spec.RuntimeClassName
			switch {
			case want[ds] && runtime == "containerd" && (got == nil || *got != builder.RuntimeClassName):
				t.Errorf("%s on containerd: runtime class %v, want %s", ds, got, builder.RuntimeClassName)
			case (!want[ds] || runtime == "crio") && got != nil:
				t.Errorf("%s on %s: runtime class %s, the GPU Operator sets none", ds, runtime, *got)
			}
		}
	}
}
