package render_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/trainops/trainops/render"
)

// BenchmarkRenderPlain1000 renders a plain folder of 1,000 PyJob files, as
// a sync and an offline diff of a large repository do.
func BenchmarkRenderPlain1000(b *testing.B) {
	dir := b.TempDir()
	for i := range 1000 {
		p := filepath.Join(dir, "jobs", fmt.Sprintf("job-%04d.yaml", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		y := fmt.Sprintf("apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: job-%04d\n  namespace: team\nspec:\n  image: pytorch/pytorch:2.0\n  command: [\"torchrun\", \"train.py\"]\n  gpu: 2\n  workers: 2\n", i)
		if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		objs, err := render.Render(dir, ".")
		if err != nil {
			b.Fatal(err)
		}
		if len(objs) != 1000 {
			b.Fatalf("rendered %d objects, want 1000", len(objs))
		}
	}
}
