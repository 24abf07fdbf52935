// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/render"
)

// TestCacheSharesWhatRevisionsRenderAlike renders revisions through one
// Cache, in each layout: every render equals an uncached one, in the same
// order; an object of a file unchanged since the render before is that
// render's very object, and a changed file's objects are made anew.
func TestCacheSharesWhatRevisionsRenderAlike(t *testing.T) {
	for _, l := range benchrepo.Layouts {
		t.Run(string(l), func(t *testing.T) {
			dir := t.TempDir()
			objs := benchrepo.Generate(40, "c")
			if err := benchrepo.Write(dir, objs, l); err != nil {
				t.Fatal(err)
			}
			c := &render.Cache{}
			var last map[string]*unstructured.Unstructured
			// next renders through c and checks it against an uncached
			// render, and which objects the render before gave.
			next := func(what string, changed ...string) []render.Object {
				t.Helper()
				got, err := render.RenderCached(context.Background(), dir, l.Path(), render.Limits{}, c)
				if err != nil {
					t.Fatal(err)
				}
				want, err := render.Render(dir, l.Path())
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: the cached render differs from an uncached one", what)
				}
				byID := map[string]*unstructured.Unstructured{}
				for _, o := range got {
					byID[o.ID()] = o.Unstructured
					if last == nil {
						continue
					}
					fresh := slices.Contains(changed, o.GetName())
					if shared := last[o.ID()] == o.Unstructured; shared == fresh {
						t.Errorf("%s: %s shared with the render before: %v, want %v", what, o.ID(), shared, !fresh)
					}
				}
				last = byID
				return got
			}
			first := next("first")
			next("second, nothing changed")
			// One file changed: its new content, not the kept one.
			end := objs[len(objs)-1]
			f := filepath.Join(dir, l.FileOf(end))
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte(string(raw[:len(raw)-1])+"\n"+"---\n"+benchrepo.PyJobYAML("c-0", "added")), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := next("after a file changed", end.U.GetName(), "added"); len(got) != len(first)+1 {
				t.Fatalf("after a file gained an object: %d objects, want %d", len(got), len(first)+1)
			}
			// One in the middle: its objects where they were, between
			// files taken from the cache.
			middle := objs[len(objs)/2]
			f = filepath.Join(dir, l.FileOf(middle))
			if raw, err = os.ReadFile(f); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte(strings.Replace(string(raw), "gpu: 2", "gpu: 4", 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			next("after a file in the middle changed", middle.U.GetName())
		})
	}
}

// A patch that deletes an object does not move the objects of the files
// the cache gives in its place.
func TestCacheKeepsOrderPastADeletedObject(t *testing.T) {
	dir := t.TempDir()
	write := writeIn(t, dir)
	cm := func(name, value string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n  namespace: ml\ndata:\n  v: \"" + value + "\"\n"
	}
	write("kustomization.yaml", `resources: [a.yaml, b.yaml, c.yaml]
patches:
- patch: |-
    $patch: delete
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: a
      namespace: ml
`)
	write("a.yaml", cm("a", "1"))
	write("b.yaml", cm("b", "1"))
	write("c.yaml", cm("c", "1"))
	if _, fastErr, _, err := render.BuildBoth(dir, "."); fastErr != nil || err != nil {
		t.Fatalf("the tree is not the fast path's (%v, %v): the test shows nothing", fastErr, err)
	}
	c := &render.Cache{}
	names := func(objs []render.Object) string {
		var out []string
		for _, o := range objs {
			if o.Reused {
				out = append(out, "reused "+o.File)
				continue
			}
			out = append(out, o.GetName())
		}
		return strings.Join(out, ",")
	}
	for _, step := range []string{"first", "after c changed"} {
		got, err := render.RenderCached(context.Background(), dir, ".", render.Limits{}, c)
		if err != nil {
			t.Fatal(err)
		}
		want, err := render.Render(dir, ".")
		if err != nil {
			t.Fatal(err)
		}
		if names(want) != "b,c" {
			t.Fatalf("%s: an uncached render gives %s, want b,c", step, names(want))
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the cached render gives %s, an uncached one %s", step, names(got), names(want))
		}
		write("c.yaml", cm("c", "2"))
	}
	// b's file taken from the caller: its place is where b was.
	got, err := render.RenderReusing(context.Background(), dir, ".", render.Limits{}, func(file, _ string) ([]string, bool) {
		return []string{"ConfigMap"}, file == "b.yaml"
	})
	if err != nil {
		t.Fatal(err)
	}
	if names(got) != "reused b.yaml,c" {
		t.Errorf("reusing b.yaml gives %s, want it before c", names(got))
	}
}

// A file listed twice, which the cache holds from the render before, is
// refused as kustomize refuses it, not given twice.
func TestCacheRefusesAFileListedTwice(t *testing.T) {
	dir := t.TempDir()
	write := writeIn(t, dir)
	write("a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n")
	write("kustomization.yaml", "resources: [a.yaml]\n")
	c := &render.Cache{}
	if _, err := render.RenderCached(context.Background(), dir, ".", render.Limits{}, c); err != nil {
		t.Fatal(err)
	}
	write("kustomization.yaml", "resources: [a.yaml, a.yaml]\n")
	objs, err := render.RenderCached(context.Background(), dir, ".", render.Limits{}, c)
	if err == nil || !strings.Contains(err.Error(), "already registered id") {
		t.Fatalf("rendered %d objects, error %v: want kustomize's refusal", len(objs), err)
	}
}

// writeIn is a function that writes a file in dir.
func writeIn(t *testing.T, dir string) func(name, content string) {
	return func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
