// SPDX-License-Identifier: Apache-2.0

package gpuparity

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/driverupgrade"
)

// operatorLibs is the folder of github.com/NVIDIA/k8s-operator-libs at the
// version the GPU Operator's go.mod pins, downloaded through the module
// proxy.
func operatorLibs(t *testing.T) string {
	t.Helper()
	const module = "github.com/NVIDIA/k8s-operator-libs"
	raw, err := os.ReadFile(filepath.Join(upstream(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	version := ""
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == module {
			version = f[1]
		}
	}
	if version == "" {
		t.Fatalf("the GPU Operator's go.mod does not require %s", module)
	}
	out, err := exec.Command("go", "mod", "download", "-json", module+"@"+version).Output()
	if err != nil {
		t.Fatalf("download %s@%s: %v", module, version, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Error != "" {
		t.Fatalf("download %s@%s: %v %s", module, version, err, m.Error)
	}
	return m.Dir
}

// stringConsts reads the string constants a Go file declares.
func stringConsts(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out[name.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
	}
	return out
}

// TestUpgradeStatesAreTheLibrarys holds the driver upgrade's node label
// and state names to those of NVIDIA's upgrade library, at the version the
// GPU Operator release uses, so its runbooks and dashboards read them.
func TestUpgradeStatesAreTheLibrarys(t *testing.T) {
	lib := stringConsts(t, filepath.Join(operatorLibs(t), "pkg", "upgrade", "consts.go"))
	if want := fmt.Sprintf(lib["UpgradeStateLabelKeyFmt"], "gpu"); driverupgrade.UpgradeStateLabel != want {
		t.Errorf("label %s, the library's %s", driverupgrade.UpgradeStateLabel, want)
	}
	for ours, theirs := range map[string]string{
		driverupgrade.UpgradeRequired:    "UpgradeStateUpgradeRequired",
		driverupgrade.DrainRequired:      "UpgradeStateDrainRequired",
		driverupgrade.PodRestartRequired: "UpgradeStatePodRestartRequired",
		driverupgrade.ValidationRequired: "UpgradeStateValidationRequired",
		driverupgrade.UpgradeDone:        "UpgradeStateDone",
		driverupgrade.UpgradeFailed:      "UpgradeStateFailed",
	} {
		if lib[theirs] != ours {
			t.Errorf("state %q, the library's %s is %q", ours, theirs, lib[theirs])
		}
	}
}

// jsonFields are the JSON names of the fields of the struct typeName that
// a Go file declares.
func jsonFields(t *testing.T, path, typeName string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != typeName {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			if field.Tag != nil {
				tag, _ := strconv.Unquote(field.Tag.Value)
				out = append(out, strings.Split(reflect.StructTag(tag).Get("json"), ",")[0])
			}
		}
		return false
	})
	return out
}

// TestPodDeletionIsTheLibrarys holds driver.upgradePolicy.podDeletion to
// the library's PodDeletionSpec: each field trainops has is one of the
// library's, under its name (its timeoutSeconds is trainops's
// drain.timeout), and the validator pods a node's validation waits for
// are those the GPU Operator's own upgrade waits for.
func TestPodDeletionIsTheLibrarys(t *testing.T) {
	theirs := jsonFields(t, filepath.Join(operatorLibs(t), "api", "upgrade", "v1alpha1", "upgrade_spec.go"), "PodDeletionSpec")
	ours := reflect.TypeFor[gpuv1alpha1.PodDeletionSpec]()
	for i := range ours.NumField() {
		name := strings.Split(ours.Field(i).Tag.Get("json"), ",")[0]
		if !slices.Contains(theirs, name) {
			t.Errorf("podDeletion.%s is not a field of the library's PodDeletionSpec %v", name, theirs)
		}
	}
	main, err := os.ReadFile(filepath.Join(upstream(t), "cmd", "gpu-operator", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("WithValidationEnabled(%q)", "app="+builder.ValidatorDaemonSet); !strings.Contains(string(main), want) {
		t.Errorf("the GPU Operator's upgrade does not wait for %s: its main.go has no %s", builder.ValidatorDaemonSet, want)
	}
}
