package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestDemoOnce runs the README's first command as `DEMO_ONCE=1 make demo`
// does, with a freshly built trainops: it must settle and exit cleanly.
func TestDemoOnce(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "trainops")
	build := exec.Command("go", "build", "-o", bin, "github.com/trainops/trainops/cmd/trainops")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build trainops: %v\n%s", err, out)
	}
	t.Setenv("TRAINOPS_BIN", bin)
	t.Setenv("DEMO_ONCE", "1")
	t.Setenv("DEMO_DIR", filepath.Join(dir, "demo"))
	if err := run(); err != nil {
		t.Fatalf("demo: %v", err)
	}
}
