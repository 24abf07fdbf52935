// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/render"
)

// keysOf renders dir reusing nothing: each file's key, and its objects'
// kinds.
func keysOf(t *testing.T, dir, path string) (map[string]string, map[string][]string, []render.Object) {
	t.Helper()
	keys, kinds := map[string]string{}, map[string][]string{}
	objs, err := render.RenderReusing(context.Background(), dir, path, render.Limits{}, func(file, key string) ([]string, bool) {
		return nil, false
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Reused || o.Key == "" {
			t.Fatalf("%s: reused %v, key %q: want a parsed object with its file's key", o.File, o.Reused, o.Key)
		}
		if k, ok := keys[o.File]; ok && k != o.Key {
			t.Fatalf("%s: two keys for one file", o.File)
		}
		keys[o.File] = o.Key
		kinds[o.File] = append(kinds[o.File], o.GetKind())
	}
	return keys, kinds, objs
}

// withoutKeys is objs as a render without reuse gives them.
func withoutKeys(objs []render.Object) []render.Object {
	out := make([]render.Object, len(objs))
	for i, o := range objs {
		o.Key = ""
		out[i] = o
	}
	return out
}

// TestRenderReusingParsesOnlyWhatChanged renders each layout, changes one
// file, and renders again reusing the rest: the render gives that file's
// objects, as a whole render does, and one Reused object for each other
// file, which it did not parse (one of them no longer parses at all). A
// file added to a kustomization's list is the only one parsed; changing a
// patch the files are built through changes every key.
func TestRenderReusingParsesOnlyWhatChanged(t *testing.T) {
	for _, l := range benchrepo.Layouts {
		t.Run(string(l), func(t *testing.T) {
			dir := t.TempDir()
			objs := benchrepo.Generate(30, "r")
			if err := benchrepo.Write(dir, objs, l); err != nil {
				t.Fatal(err)
			}
			keys, kinds, first := keysOf(t, dir, l.Path())
			whole, err := render.Render(dir, l.Path())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(withoutKeys(first), whole) {
				t.Fatal("a render asking to reuse nothing differs from a whole render")
			}

			changed := l.FileOf(objs[len(objs)-1])
			broken := l.FileOf(objs[len(objs)-2])
			if changed == broken || keys[changed] == "" || keys[broken] == "" {
				t.Fatalf("want two files of objects, got %q and %q", changed, broken)
			}
			raw, err := os.ReadFile(filepath.Join(dir, changed))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, changed), append(raw, []byte("  changed: \"yes\"\n")...), 0o644); err != nil {
				t.Fatal(err)
			}
			// Reuse answers for broken whatever its key: were it parsed,
			// the render would fail.
			brokenRaw, err := os.ReadFile(filepath.Join(dir, broken))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, broken), []byte("not: an object\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			asked := map[string]int{}
			var mu sync.Mutex
			got, err := render.RenderReusing(context.Background(), dir, l.Path(), render.Limits{}, func(file, key string) ([]string, bool) {
				mu.Lock()
				defer mu.Unlock()
				asked[file]++
				if file == broken {
					return kinds[file], true
				}
				return kinds[file], key == keys[file]
			})
			if err != nil {
				t.Fatalf("the render parsed a reused file: %v", err)
			}
			var parsed, reused []string
			for _, o := range got {
				if o.Reused {
					if o.Unstructured != nil {
						t.Errorf("%s: a Reused object with an object", o.File)
					}
					reused = append(reused, o.File)
					continue
				}
				parsed = append(parsed, o.File)
				if o.Key == keys[o.File] {
					t.Errorf("%s: its key did not change with its bytes", o.File)
				}
				if o.GetLabels()["changed"] != "" || o.Object["spec"] == nil {
					t.Errorf("%s: %v", o.File, o.Object)
				}
			}
			if want := []string{changed}; !slices.Equal(slices.Compact(parsed), want) {
				t.Errorf("parsed %v, want %v", parsed, want)
			}
			var others []string
			for f := range keys {
				if f != changed {
					others = append(others, f)
				}
			}
			slices.Sort(others)
			slices.Sort(reused)
			if !slices.Equal(reused, others) {
				t.Errorf("reused %d files, want the %d others", len(reused), len(others))
			}
			for f, n := range asked {
				if n != 1 {
					t.Errorf("%s: asked %d times, want once", f, n)
				}
			}

			// A new file, listed in its kustomization: only it is parsed,
			// whatever the list around it says now.
			if err := os.WriteFile(filepath.Join(dir, broken), brokenRaw, 0o644); err != nil {
				t.Fatal(err)
			}
			keys, kinds, _ = keysOf(t, dir, l.Path())
			added := benchrepo.NewPyJob(objs[len(objs)-1].U.GetNamespace(), "added")
			if err := benchrepo.Add(dir, added, l); err != nil {
				t.Fatal(err)
			}
			got, err = render.RenderReusing(context.Background(), dir, l.Path(), render.Limits{}, func(file, key string) ([]string, bool) {
				return kinds[file], key == keys[file]
			})
			if err != nil {
				t.Fatal(err)
			}
			parsed = parsed[:0]
			for _, o := range got {
				if !o.Reused {
					parsed = append(parsed, o.File)
				}
			}
			if want := []string{l.FileOf(added)}; !slices.Equal(parsed, want) {
				t.Errorf("after a file was added: parsed %v, want %v", parsed, want)
			}

			if l != benchrepo.Overlays {
				return
			}
			// The overlay's patch changes: every file is built anew.
			k := filepath.Join(dir, "clusters", "prod", "kustomization.yaml")
			raw, err = os.ReadFile(k)
			if err != nil {
				t.Fatal(err)
			}
			patched := strings.Replace(string(raw), "monitorInterval: 30", "monitorInterval: 45", 1)
			if patched == string(raw) {
				t.Fatal("the overlay has no SREAgent patch to change")
			}
			if err := os.WriteFile(k, []byte(patched), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err = render.RenderReusing(context.Background(), dir, l.Path(), render.Limits{}, func(file, key string) ([]string, bool) {
				return kinds[file], key == keys[file]
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range got {
				if o.Reused {
					t.Fatalf("%s reused after the overlay's patch changed", o.File)
				}
			}
		})
	}
}

// TestReusedKindsStillSendTreesToKrusty: a reused file's kinds count when
// the fast path decides whether krusty's name references could rewrite
// something. A ConfigMap kept from the last render, and a file that held a
// PyJob and now holds a Deployment that may refer to it, make the tree
// krusty's, built whole.
func TestReusedKindsStillSendTreesToKrusty(t *testing.T) {
	dir := t.TempDir()
	write := writer(t, dir)
	write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: b\n")
	write("app.yaml", benchrepo.PyJobYAML("team-a", "train"))
	write("kustomization.yaml", "resources:\n- cm.yaml\n- app.yaml\nnamespace: team-a\n")
	keys, kinds, _ := keysOf(t, dir, ".")
	write("app.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx\n        envFrom:\n        - configMapRef: {name: settings}\n")
	var cmReused bool
	var mu sync.Mutex
	got, err := render.RenderReusing(context.Background(), dir, ".", render.Limits{}, func(file, key string) ([]string, bool) {
		mu.Lock()
		defer mu.Unlock()
		ok := key == keys[file]
		cmReused = cmReused || (file == "cm.yaml" && ok)
		return kinds[file], ok
	})
	if err != nil {
		t.Fatal(err)
	}
	whole, err := render.Render(dir, ".")
	if err != nil {
		t.Fatal(err)
	}
	if !cmReused {
		t.Fatal("the fast path did not offer to reuse cm.yaml")
	}
	if !reflect.DeepEqual(got, whole) {
		t.Fatalf("got %v, want krusty's whole build %v", got, whole)
	}
}

// TestAFileBuiltTwiceHasNoKey: a base two overlays share is built through
// each, into two objects of one file. No one key stands for both, and
// the render gives its objects none, so no caller can reuse it.
func TestAFileBuiltTwiceHasNoKey(t *testing.T) {
	dir := t.TempDir()
	write := writer(t, dir)
	write("common/job.yaml", benchrepo.PyJobYAML("x", "train"))
	write("common/kustomization.yaml", "resources:\n- job.yaml\n")
	write("a/kustomization.yaml", "resources:\n- ../common\nnamespace: team-a\n")
	write("b/kustomization.yaml", "resources:\n- ../common\nnamespace: team-b\n")
	write("own.yaml", benchrepo.PyJobYAML("team-c", "own"))
	write("kustomization.yaml", "resources:\n- a\n- b\n- own.yaml\n")
	objs, err := render.RenderReusing(context.Background(), dir, ".", render.Limits{}, func(string, string) ([]string, bool) { return nil, false })
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, o := range objs {
		keys[o.File+" "+o.GetNamespace()] = o.Key
	}
	if len(objs) != 3 {
		t.Fatalf("%d objects, want 3", len(objs))
	}
	if keys["common/job.yaml team-a"] != "" || keys["common/job.yaml team-b"] != "" {
		t.Error("the shared base's file has a key")
	}
	if keys["own.yaml team-c"] == "" {
		t.Error("a file built once has no key")
	}
}

// writer writes files under dir, making their folders.
func writer(t *testing.T, dir string) func(p, s string) {
	return func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
