// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"testing"

	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/render"
)

// BenchmarkRender1000 renders a repository of 1,000 objects in each layout
// users keep (internal/benchrepo): a plain folder, one kustomization.yaml
// listing every file, and team folders under a base with an overlay.
func BenchmarkRender1000(b *testing.B) {
	objs := benchrepo.Generate(1000, "bench")
	for _, l := range benchrepo.Layouts {
		b.Run(string(l), func(b *testing.B) {
			dir := b.TempDir()
			if err := benchrepo.Write(dir, objs, l); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				out, err := render.Render(dir, l.Path())
				if err != nil {
					b.Fatal(err)
				}
				if len(out) != len(objs) {
					b.Fatalf("rendered %d objects, want %d", len(out), len(objs))
				}
			}
		})
	}
}
