// SPDX-License-Identifier: Apache-2.0

package offline

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/convert"
	"github.com/trainops/trainops/internal/crdschema"
)

// TestStockHelmValuesConvert: the GPU Operator chart's own values.yaml, at
// the release convert follows (downloaded through the Go module proxy),
// converts to a ClusterPolicy that validates, every image in it tagged.
func TestStockHelmValuesConvert(t *testing.T) {
	raw, err := exec.Command("go", "mod", "download", "-json", builder.GPUOperatorModule).Output()
	if err != nil {
		t.Fatalf("download %s: %v", builder.GPUOperatorModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(raw, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("download %s: %v %s", builder.GPUOperatorModule, err, raw)
	}
	values, err := os.ReadFile(filepath.Join(mod.Dir, "deployments", "gpu-operator", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := crdschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := convert.HelmValues(values, "values.yaml", schemas)
	if err != nil {
		t.Fatalf("convert: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "clusterpolicy.yaml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := NewLoader(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := load(t, l, dir); err != nil {
		t.Fatalf("the converted ClusterPolicy does not validate: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		ref, ok := strings.CutPrefix(strings.TrimSpace(line), "image: ")
		if last := ref[strings.LastIndex(ref, "/")+1:]; ok && strings.Contains(ref, "/") && !strings.ContainsAny(last, ":@") {
			t.Errorf("image %s has no tag", ref)
		}
	}
}
