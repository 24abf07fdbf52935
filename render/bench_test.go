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
	writeJobs(b, dir, 1000)
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

// BenchmarkRenderKustomize1000 renders the same 1,000 files listed in one
// kustomization.yaml, the layout most repositories keep: the pre-scan, the
// isolated build and the decoding of its output.
func BenchmarkRenderKustomize1000(b *testing.B) {
	dir := b.TempDir()
	k := "resources:\n"
	for _, name := range writeJobs(b, dir, 1000) {
		k += "- " + name + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		b.Fatal(err)
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

// writeJobs writes n PyJob files under dir/jobs and returns their paths
// relative to dir.
func writeJobs(b *testing.B, dir string, n int) []string {
	b.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("jobs/job-%04d.yaml", i)
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		y := fmt.Sprintf("apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: job-%04d\n  namespace: team\nspec:\n  image: pytorch/pytorch:2.0\n  command: [\"torchrun\", \"train.py\"]\n  gpu: 2\n  workers: 2\n", i)
		if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
			b.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}
