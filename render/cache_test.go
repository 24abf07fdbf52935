package render_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/render"
)

// TestCacheGivesEachRenderItsOwn renders two revisions through one Cache,
// in each layout: every render equals an uncached one, in the same order,
// though the one before changed its objects, and a changed file is read
// anew.
func TestCacheGivesEachRenderItsOwn(t *testing.T) {
	for _, l := range benchrepo.Layouts {
		t.Run(string(l), func(t *testing.T) {
			dir := t.TempDir()
			objs := benchrepo.Generate(40, "c")
			if err := benchrepo.Write(dir, objs, l); err != nil {
				t.Fatal(err)
			}
			c := &render.Cache{}
			same := func(what string) []render.Object {
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
				return got
			}
			first := same("first")
			for _, what := range []string{"second", "third"} {
				for _, o := range same(what + ", after the last render's objects were changed") {
					o.SetLabels(map[string]string{"changed": "by the last render's user"})
					o.Object["spec"] = "gone"
				}
			}
			// One file changed: its new content, not the kept one.
			f := filepath.Join(dir, l.FileOf(objs[len(objs)-1]))
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte(string(raw[:len(raw)-1])+"\n"+"---\n"+benchrepo.PyJobYAML("c-0", "added")), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := same("after a file changed"); len(got) != len(first)+1 {
				t.Fatalf("after a file gained an object: %d objects, want %d", len(got), len(first)+1)
			}
			// One in the middle: its objects where they were, between
			// files taken from the cache.
			f = filepath.Join(dir, l.FileOf(objs[len(objs)/2]))
			if raw, err = os.ReadFile(f); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte(strings.Replace(string(raw), "gpu: 2", "gpu: 4", 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			same("after a file in the middle changed")
		})
	}
}
