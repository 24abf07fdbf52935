// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateExamplesFolderIsEachRoot: the command examples/README.md
// gives works: a folder without a kustomization of its own is its base and
// each overlay, each valid on its own and named.
func TestValidateExamplesFolderIsEachRoot(t *testing.T) {
	out, errOut, code := run(t, "validate", examples)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, root := range []string{"base: valid:", "clusters/dev: valid:", "clusters/prod: valid:"} {
		if !strings.Contains(out, root) {
			t.Errorf("validate examples/ does not report %q:\n%s", root, out)
		}
	}
	out, errOut, code = run(t, "render", "--expand", examples)
	if code != ExitOK || !strings.Contains(out, "# Root: clusters/prod") || !strings.Contains(out, "name: distributed-training-job") {
		t.Fatalf("render --expand examples/: exit %d\n%s", code, errOut)
	}
}

// TestValidateAFileAndEveryRoot: a file is checked alone; --all checks
// each kustomization root, names the one that is invalid, and leaves out
// components.
func TestValidateAFileAndEveryRoot(t *testing.T) {
	out, errOut, code := run(t, "validate", filepath.Join(examples, "base", "jobs", "bert-training.yaml"))
	if code != ExitOK || !strings.Contains(out, "valid: 1 objects, 1 PyJob") {
		t.Fatalf("one file: exit %d\n%s%s", code, out, errOut)
	}
	dir := t.TempDir()
	write := func(p, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("base/kustomization.yaml", "resources:\n- job.yaml\n")
	write("base/job.yaml", pj("job-a", "1"))
	write("clusters/good/kustomization.yaml", "resources:\n- ../../base\n")
	write("clusters/bad/kustomization.yaml", "resources:\n- ../../base\npatches:\n- target:\n    kind: PyJob\n  patch: |\n    - op: replace\n      path: /spec/gpu\n      value: -2\n")
	write("components/extra/kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n")
	out, errOut, code = run(t, "validate", "--all", dir)
	if code != ExitChanges {
		t.Fatalf("--all with an invalid overlay: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "base: valid") || !strings.Contains(out, "clusters/good: valid") || !strings.Contains(errOut, "clusters/bad: invalid") || !strings.Contains(errOut, "gpu") {
		t.Errorf("per-root report:\n%s\n%s", out, errOut)
	}
	if strings.Contains(out+errOut, "components/extra") {
		t.Errorf("a component validated as a root:\n%s%s", out, errOut)
	}
}
