// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/trainops/trainops/render"
)

// schemaChildEnv makes the test binary run TestPatchOfACustomKindLoadsNoSchema's
// renders, in a process of its own.
const schemaChildEnv = "TRAINOPS_SCHEMA_CHILD"

// TestPatchOfACustomKindLoadsNoSchema shows that a strategic merge patch
// of trainops's own kinds leaves kyaml's built-in OpenAPI schema unparsed,
// and that the measure sees it parsed when a Deployment is patched. In a
// fresh process: kyaml parses the schema once, and keeps it.
func TestPatchOfACustomKindLoadsNoSchema(t *testing.T) {
	if os.Getenv(schemaChildEnv) != "" {
		schemaChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPatchOfACustomKindLoadsNoSchema$", "-test.v")
	cmd.Env = append(os.Environ(), schemaChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	grew := map[string]float64{}
	for _, line := range strings.Split(string(out), "\n") {
		var kind string
		var mib float64
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "patched %s the live heap grew %g MiB", &kind, &mib); err == nil {
			grew[kind] = mib
		}
	}
	t.Logf("live heap grew: %v", grew)
	sre, okS := grew["SREAgent:"]
	dep, okD := grew["Deployment:"]
	if !okS || !okD {
		t.Fatalf("the child reported %v:\n%s", grew, out)
	}
	if dep < 3 {
		t.Errorf("patching a Deployment grew the live heap by %.1f MiB: the measure no longer sees kyaml's schema", dep)
	}
	if sre > 1 {
		t.Errorf("patching an SREAgent grew the live heap by %.1f MiB: kyaml's schema was parsed", sre)
	}
}

// schemaChild renders an SREAgent patched, then a Deployment patched, and
// prints how much the live heap grew each time.
func schemaChild(t *testing.T) {
	trees := []struct{ kind, doc, patch string }{
		{"SREAgent", "apiVersion: aiops.trainops.dev/v1alpha1\nkind: SREAgent\nmetadata:\n  name: a\nspec:\n  autoRepair: true\n",
			"apiVersion: aiops.trainops.dev/v1alpha1\n    kind: SREAgent\n    metadata:\n      name: any\n    spec:\n      monitorInterval: 30\n"},
		{"Deployment", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n        image: busybox\n",
			"apiVersion: apps/v1\n    kind: Deployment\n    metadata:\n      name: any\n    spec:\n      replicas: 2\n"},
	}
	write := func(files map[string]string) string {
		dir := t.TempDir()
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	// What every fast build sets up, set up before the measures.
	if _, err := render.Render(write(map[string]string{"a.yaml": trees[0].doc, "kustomization.yaml": "resources:\n- a.yaml\ncommonLabels:\n  a: b\n"}), "."); err != nil {
		t.Fatal(err)
	}
	for _, tr := range trees {
		dir := write(map[string]string{"a.yaml": tr.doc,
			"kustomization.yaml": "resources:\n- a.yaml\npatches:\n- target:\n    kind: " + tr.kind + "\n  patch: |\n    " + tr.patch})
		before := liveHeap()
		objs, err := render.Render(dir, ".")
		if err != nil {
			t.Fatal(err)
		}
		after := liveHeap()
		runtime.KeepAlive(objs)
		fmt.Printf("patched %s: the live heap grew %s MiB\n", tr.kind, strconv.FormatFloat(float64(after-before)/(1<<20), 'f', 2, 64))
	}
}

func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
