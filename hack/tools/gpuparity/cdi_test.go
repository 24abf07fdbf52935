// SPDX-License-Identifier: Apache-2.0

package gpuparity

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// objectControls is the GPU Operator's controllers/object_controls.go,
// parsed, with the values of its string constants.
func objectControls(t *testing.T) (*ast.File, map[string]string) {
	t.Helper()
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, filepath.Join(upstream(t), "controllers", "object_controls.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[n.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	return f, consts
}

// cdiEnv reads, from the GPU Operator's own controllers/object_controls.go,
// the variables and values the Transform function fn sets on its first
// container when CDI is enabled (config.CDI.IsEnabled()), and, apart, those
// it sets only when CDI is the default mode (config.CDI.IsDefault()).
func cdiEnv(t *testing.T, fn string) (enabled, onlyDefault map[string]string) {
	t.Helper()
	f, consts := objectControls(t)
	value := func(e ast.Expr) string {
		switch v := e.(type) {
		case *ast.BasicLit:
			s, _ := strconv.Unquote(v.Value)
			return s
		case *ast.Ident:
			return consts[v.Name]
		}
		return "?" // computed (a path joined at run time)
	}
	enabled, onlyDefault = map[string]string{}, map[string]string{}
	var walk func(n ast.Node, into map[string]string)
	walk = func(n ast.Node, into map[string]string) {
		ast.Inspect(n, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.IfStmt:
				if sel, ok := x.Cond.(*ast.CallExpr); ok {
					if s, ok := sel.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "IsDefault" {
						walk(x.Body, onlyDefault)
						return false
					}
				}
			case *ast.CallExpr:
				if id, ok := x.Fun.(*ast.Ident); ok && id.Name == "setContainerEnv" && len(x.Args) == 3 {
					into[value(x.Args[1])] = value(x.Args[2])
				}
			}
			return true
		})
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != fn {
			continue
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			ifs, ok := n.(*ast.IfStmt)
			if !ok {
				return true
			}
			if call, ok := ifs.Cond.(*ast.CallExpr); ok {
				if s, ok := call.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "IsEnabled" {
					if inner, ok := s.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "CDI" {
						walk(ifs.Body, enabled)
						return false
					}
				}
			}
			return true
		})
	}
	if len(enabled) == 0 {
		t.Fatalf("found no CDI settings in the GPU Operator's %s", fn)
	}
	return enabled, onlyDefault
}

// TestCDISettingsMatchUpstream: with CDI on, the toolkit and the device
// plugin get every variable the GPU Operator's TransformToolkit and
// TransformDevicePlugin set, with the same value where it is a constant;
// those it sets only for cdi.default trainops sets only then.
func TestCDISettingsMatchUpstream(t *testing.T) {
	for _, c := range []struct{ fn, daemonSet string }{
		{"TransformToolkit", builder.ToolkitDaemonSet},
		{"TransformDevicePlugin", builder.DevicePluginDaemonSet},
	} {
		enabled, onlyDefault := cdiEnv(t, c.fn)
		for _, def := range []bool{false, true} {
			cp := clusterPolicy(t, "clusterpolicy-minimal")
			cp.Spec.ContainerRuntime.CDI.Enabled, cp.Spec.ContainerRuntime.CDI.Default = true, def
			// The GPU Operator's isolation: Strict's device list is a
			// listed difference of its own.
			cp.Spec.ContainerRuntime.Isolation = gpuv1alpha1.IsolationEnvvar
			env := built[*appsv1.DaemonSet](t, cp, c.daemonSet).Spec.Template.Spec.Containers[0].Env
			has := func(name string) (string, bool) {
				i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
				if i < 0 {
					return "", false
				}
				return env[i].Value, true
			}
			for name, want := range enabled {
				got, ok := has(name)
				switch {
				case !ok:
					t.Errorf("%s (cdi.default %v): the GPU Operator's %s sets %s, trainops does not", c.daemonSet, def, c.fn, name)
				case want != "?" && got != want:
					t.Errorf("%s: %s is %q, the GPU Operator's %q", c.daemonSet, name, got, want)
				case want == "?" && !strings.HasPrefix(got, "/"):
					t.Errorf("%s: %s is %q, want a path", c.daemonSet, name, got)
				}
			}
			for name, want := range onlyDefault {
				got, ok := has(name)
				if ok != def || def && got != want {
					t.Errorf("%s (cdi.default %v): %s=%q (set %v), the GPU Operator sets %q only with cdi.default", c.daemonSet, def, name, got, ok, want)
				}
			}
		}
	}
}
