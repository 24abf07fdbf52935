// SPDX-License-Identifier: Apache-2.0

package gpuparity

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	nodev1 "k8s.io/api/node/v1"

	gpuv1 "github.com/NVIDIA/gpu-operator/api/nvidia/v1"
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

// TestRuntimeClassesAsUpstream: trainops creates the GPU Operator's
// RuntimeClasses (assets/pre-requisites): the nvidia one always, and those
// its RuntimeClasses function creates only with CDI on (nvidia-cdi,
// nvidia-legacy) only then, each with the upstream's handler.
func TestRuntimeClassesAsUpstream(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(upstream(t), "assets", "pre-requisites", "*runtime_class*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no RuntimeClasses in the GPU Operator's pre-requisites: %v", err)
	}
	cdiOnly := regexp.MustCompile(`obj\.Name == "([^"]+)"`).FindAllStringSubmatch(funcSource(t, "RuntimeClasses"), -1)
	if len(cdiOnly) == 0 {
		t.Fatal("the GPU Operator's RuntimeClasses function names no CDI-only RuntimeClass")
	}
	onlyWithCDI := map[string]bool{}
	for _, m := range cdiOnly {
		onlyWithCDI[m[1]] = true
	}
	for _, cdi := range []bool{false, true} {
		cp := clusterPolicy(t, "clusterpolicy-minimal")
		cp.Spec.ContainerRuntime.CDI.Enabled = cdi
		ours := map[string]string{}
		for _, o := range builder.ForClusterPolicy(cp, builder.OfflineGPUNodes).Objects {
			if rc, ok := o.(*nodev1.RuntimeClass); ok {
				ours[rc.Name] = rc.Handler
			}
		}
		want := map[string]string{}
		for _, f := range files {
			var rc nodev1.RuntimeClass
			readYAML(t, f, &rc)
			if strings.HasPrefix(rc.Name, "FILLED") {
				// The operator's configurable class: its default name.
				rc.Name, rc.Handler = getRuntimeClass(&gpuv1.ClusterPolicySpec{}), getRuntimeClass(&gpuv1.ClusterPolicySpec{})
			}
			if onlyWithCDI[rc.Name] && !cdi {
				continue
			}
			want[rc.Name] = rc.Handler
		}
		if !maps.Equal(ours, want) {
			t.Errorf("CDI %v: RuntimeClasses (name: handler) %v, the GPU Operator's %v", cdi, ours, want)
		}
	}
}

// funcSource is the source text of the GPU Operator's function fn in
// controllers/object_controls.go.
func funcSource(t *testing.T, fn string) string {
	t.Helper()
	path := filepath.Join(upstream(t), "controllers", "object_controls.go")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, path, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == fn {
			return string(src[fs.Position(fd.Pos()).Offset:fs.Position(fd.End()).Offset])
		}
	}
	t.Fatalf("no function %s in the GPU Operator's object_controls.go", fn)
	return ""
}
