// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainops/trainops/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/golden/cli")

func golden(t *testing.T, name, got string) {
	t.Helper()
	testenv.Golden(t, filepath.Join("..", "..", "testdata", "golden", "cli", name), []byte(got), *update, "run go test ./internal/cli -update")
}

var examples = filepath.Join("..", "..", "examples")

func TestRenderGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"render-examples.yaml", []string{"render", examples, "--path=clusters/dev", "--agent-image=ghcr.io/trainops/trainops:test"}},
		{"render-expand-examples.yaml", []string{"render", "--expand", examples, "--path=clusters/dev", "--agent-image=ghcr.io/trainops/trainops:test"}},
		{"render-expand-examples-prod.yaml", []string{"render", "--expand", examples, "--path=clusters/prod", "--agent-image=ghcr.io/trainops/trainops:test"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := run(t, tc.args...)
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			golden(t, tc.name, out)
		})
	}
}

func TestValidate(t *testing.T) {
	// Every example, base and overlays, is valid, and without a warning:
	// the examples show what a real run needs.
	for _, path := range []string{"base", "clusters/dev", "clusters/prod"} {
		out, errOut, code := run(t, "validate", examples, "--path="+path)
		if code != ExitOK || !strings.Contains(out, "valid: 7 objects") || strings.Contains(out+errOut, "warning") {
			t.Fatalf("examples/%s: exit %d, %q %q", path, code, out, errOut)
		}
	}
	// An overlay named as the folder to read, as `kustomize build` takes
	// it: its ../../base is inside the repository it is in.
	out, errOut, code := run(t, "validate", filepath.Join(examples, "clusters", "dev"))
	if code != ExitOK || !strings.Contains(out, "valid: 7 objects") {
		t.Fatalf("validate examples/clusters/dev: exit %d, %q %q", code, out, errOut)
	}
	// --all under a folder reads the kustomizations under it, and nothing
	// else of the repository (config/crd holds CRDs, not allowed here).
	out, errOut, code = run(t, "validate", "--all", examples)
	if code != ExitOK || strings.Count(out, "valid: 7 objects") != 3 || strings.Contains(out+errOut, "config") {
		t.Fatalf("validate --all examples: exit %d, %q %q", code, out, errOut)
	}
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("jobs.yaml", "apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: bad\n  namespace: ml\nspec:\n  image: img\n  command: [python]\n  gpu: -2\n")
	write("agent.yaml", "apiVersion: aiops.trainops.dev/v1alpha1\nkind: SREAgent\nmetadata:\n  name: agent\n  namespace: ml\nspec:\n  monitorInterval: 1\n  autoRepiar: true\n")
	write("rbac.yaml", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: escalate\nrules: []\n")
	_, errOut, code = run(t, "validate", dir)
	if code != ExitChanges {
		t.Fatalf("exit %d, want 1 for invalid input", code)
	}
	for _, want := range []string{
		`jobs.yaml: PyJob ml/bad: PyJob.training.trainops.dev "bad" is invalid: spec.gpu: Invalid value: -2: gpu cannot be negative`,
		`agent.yaml: SREAgent ml/agent: SREAgent in version "v1alpha1" cannot be handled as a SREAgent: strict decoding error: unknown field "spec.autoRepiar"`,
		"rbac.yaml: ClusterRole escalate: kind rbac.authorization.k8s.io/v1/ClusterRole is not allowed",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("output lacks %q:\n%s", want, errOut)
		}
	}
	if _, _, code := run(t, "validate", "--allowed-kinds=nope", examples); code != ExitUsage {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
}
