// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRestrictorFlag: validate refuses a kustomization reading a file
// outside its folder as kustomize does by default, naming the file, field
// and entry; --load-restrictor LoadRestrictionsNone (or --config's
// render.loadRestrictor) accepts it; a value kustomize has not is a usage
// error.
func TestLoadRestrictorFlag(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"app/kustomization.yaml": "resources: [namespace.yaml, ../shared/job.yaml]\n",
		"app/namespace.yaml":     "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n",
		"shared/job.yaml":        "apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata: {name: bert, namespace: team-a}\nspec: {image: registry.example.com/bert:1, command: [python, train.py], workers: 1, gpu: 1}\n",
		"trainops.yaml":          "render:\n  loadRestrictor: LoadRestrictionsNone\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := run(t, "validate", dir, "--path=app")
	for _, want := range []string{"app/kustomization.yaml", "field resources", `"../shared/job.yaml"`, "outside the kustomization's folder", "LoadRestrictionsNone"} {
		if code != ExitChanges || !strings.Contains(out+errOut, want) {
			t.Fatalf("default restrictor: exit %d, %q %q does not say %q", code, out, errOut, want)
		}
	}
	for _, args := range [][]string{{"--load-restrictor=LoadRestrictionsNone"}, {"--config=" + filepath.Join(dir, "trainops.yaml")}} {
		out, errOut, code = run(t, append([]string{"validate", dir, "--path=app"}, args...)...)
		if code != ExitOK || !strings.Contains(out, "valid: 2 objects") {
			t.Fatalf("%v: exit %d, %q %q", args, code, out, errOut)
		}
	}
	out, errOut, code = run(t, "validate", dir, "--path=app", "--load-restrictor=RootOnly")
	if code != ExitUsage || !strings.Contains(errOut, "render.loadRestrictor") {
		t.Fatalf("a bad value: exit %d, %q %q", code, out, errOut)
	}
}
