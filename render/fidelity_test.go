// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trainops/trainops/render"
)

const configMapYAML = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\ndata: {a: b}\n"

// bothPaths renders path of root with the fast path and with krusty alone.
func bothPaths(t *testing.T, root, path string, l render.Limits) (fastObjs, krustyObjs []render.Object, fastErr, krustyErr error) {
	t.Helper()
	fastObjs, fastErr = render.RenderContext(context.Background(), root, path, l)
	l.NoFastPath = true
	krustyObjs, krustyErr = render.RenderContext(context.Background(), root, path, l)
	return
}

// TestEmptyKustomizationIsRefused: an empty kustomization, at the top or
// as a base, is refused as kustomize refuses it, naming its file, on both
// paths: nothing renders, so nothing can be pruned for it.
func TestEmptyKustomizationIsRefused(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"top":             {"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"},
		"top, blank":      {"kustomization.yaml": "\n"},
		"base":            {"kustomization.yaml": "resources: [base]\n", "base/kustomization.yaml": "# nothing\n"},
		"base, only kind": {"kustomization.yaml": "resources: [base, cm.yaml]\n", "cm.yaml": strings.Replace(configMapYAML, "%s", "cm", 1), "base/kustomization.yaml": "kind: Kustomization\n"},
	} {
		t.Run(name, func(t *testing.T) {
			root := tree(t, files)
			want := "kustomization.yaml"
			if _, ok := files["base/kustomization.yaml"]; ok {
				want = "base/kustomization.yaml"
			}
			fastObjs, krustyObjs, fastErr, krustyErr := bothPaths(t, root, ".", render.Limits{})
			for _, err := range []error{fastErr, krustyErr} {
				if err == nil || !strings.Contains(err.Error(), "render "+want+": kustomization.yaml is empty") {
					t.Errorf("want %s refused as empty, got %v (%d, %d objects)", want, err, len(fastObjs), len(krustyObjs))
				}
			}
		})
	}
	// A kustomization holding only a transformer is not empty to kustomize.
	root := tree(t, map[string]string{"kustomization.yaml": "namespace: team-a\n"})
	if objs, err := render.Render(root, "."); err != nil || len(objs) != 0 {
		t.Fatalf("a namespace-only kustomization: %v, %d objects", err, len(objs))
	}
}

// TestManagedByLabelNamesTheKustomizeRelease: buildMetadata
// [managedByLabel] labels every object with the kustomize release trainops
// links, on both paths; without it no object gets the label.
func TestManagedByLabelNamesTheKustomizeRelease(t *testing.T) {
	for _, meta := range []string{"buildMetadata: [managedByLabel]\n", ""} {
		root := tree(t, map[string]string{
			"kustomization.yaml":      "resources: [a.yaml, base]\n" + meta,
			"a.yaml":                  strings.Replace(configMapYAML, "%s", "a", 1),
			"base/kustomization.yaml": "resources: [b.yaml]\n",
			"base/b.yaml":             strings.Replace(configMapYAML, "%s", "b", 1),
		})
		fastObjs, krustyObjs, fastErr, krustyErr := bothPaths(t, root, ".", render.Limits{})
		if fastErr != nil || krustyErr != nil {
			t.Fatal(fastErr, krustyErr)
		}
		for _, objs := range [][]render.Object{fastObjs, krustyObjs} {
			if len(objs) != 2 {
				t.Fatalf("%d objects", len(objs))
			}
			for _, o := range objs {
				got, ok := o.GetLabels()["app.kubernetes.io/managed-by"]
				if meta != "" && got != "kustomize-"+render.KustomizeRelease {
					t.Errorf("%s: managed-by %q, want kustomize-%s", o.ID(), got, render.KustomizeRelease)
				}
				if meta == "" && ok {
					t.Errorf("%s: managed-by %q without managedByLabel", o.ID(), got)
				}
				if _, ok := o.GetAnnotations()["config.kubernetes.io/origin"]; ok {
					t.Errorf("%s: origin annotation kept without originAnnotations", o.ID())
				}
			}
		}
	}
}

// TestKustomizeReleaseIsTheLinkedOnes: KustomizeRelease is the kustomize
// release whose go.mod requires the kustomize api trainops's go.mod does
// (read from the module proxy's copy of that release's go.mod).
func TestKustomizeReleaseIsTheLinkedOnes(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	ours := regexp.MustCompile(`(?m)^\s*sigs\.k8s\.io/kustomize/api (v\S+)`).FindSubmatch(mod)
	if ours == nil {
		t.Fatal("go.mod requires no sigs.k8s.io/kustomize/api")
	}
	out, err := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/kustomize/kustomize/v5@"+render.KustomizeRelease).Output()
	if err != nil {
		t.Fatalf("go mod download kustomize %s: %v", render.KustomizeRelease, err)
	}
	var info struct{ GoMod string }
	if err := json.Unmarshal(out, &info); err != nil || info.GoMod == "" {
		t.Fatalf("go mod download: %v %s", err, out)
	}
	theirs, err := os.ReadFile(info.GoMod)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*sigs\.k8s\.io/kustomize/api ` + regexp.QuoteMeta(string(ours[1])) + `\s*$`).Match(theirs) {
		t.Fatalf("kustomize %s does not require sigs.k8s.io/kustomize/api %s (go.mod's): update render.KustomizeRelease", render.KustomizeRelease, ours[1])
	}
}

// TestLoadRestrictorIsKustomizesDefault: a file outside its
// kustomization's folder (by path, or by a symlink in it) is refused
// naming the kustomization, the field and the entry, on both paths and
// before anything is built; with LoadRestrictionsNone it renders, and
// nothing outside the repository is read either way.
func TestLoadRestrictorIsKustomizesDefault(t *testing.T) {
	files := map[string]string{
		"app/kustomization.yaml":  "resources: [../shared/cm.yaml]\n",
		"shared/cm.yaml":          strings.Replace(configMapYAML, "%s", "shared", 1),
		"link/kustomization.yaml": "resources: [cm.yaml]\n",
	}
	root := tree(t, files)
	if err := os.Symlink("../shared/cm.yaml", filepath.Join(root, "link", "cm.yaml")); err != nil {
		t.Fatal(err)
	}
	for path, entry := range map[string]string{"app": "../shared/cm.yaml", "link": "cm.yaml"} {
		fastObjs, krustyObjs, fastErr, krustyErr := bothPaths(t, root, path, render.Limits{})
		for _, err := range []error{fastErr, krustyErr} {
			want := "render " + path + "/kustomization.yaml: field resources: entry \"" + entry + "\" is outside the kustomization's folder (" + path + ")"
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "LoadRestrictionsNone") {
				t.Errorf("%s: want %q, got %v (%d, %d objects)", path, want, err, len(fastObjs), len(krustyObjs))
			}
		}
		fastObjs, krustyObjs, fastErr, krustyErr = bothPaths(t, root, path, render.Limits{LoadRestrictionsNone: true})
		if fastErr != nil || krustyErr != nil || len(fastObjs) != 1 || len(krustyObjs) != 1 || fastObjs[0].GetName() != "shared" {
			t.Errorf("%s with LoadRestrictionsNone: %v %v, %d/%d objects", path, fastErr, krustyErr, len(fastObjs), len(krustyObjs))
		}
	}
	// Bases in other folders are kustomizations of their own: allowed.
	root = tree(t, map[string]string{
		"app/kustomization.yaml":  "resources: [../base]\n",
		"base/kustomization.yaml": "resources: [cm.yaml]\n",
		"base/cm.yaml":            strings.Replace(configMapYAML, "%s", "base", 1),
	})
	if objs, err := render.Render(root, "app"); err != nil || len(objs) != 1 {
		t.Fatalf("a base in another folder: %v, %d objects", err, len(objs))
	}
}
