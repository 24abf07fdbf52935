package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BuildTrainops builds the trainops binary into a temporary folder, for
// tests that run it as a process (demo, benchmarks, faults, replicas).
func BuildTrainops(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "trainops")
	build := exec.Command("go", "build", "-o", bin, "github.com/trainops/trainops/cmd/trainops")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build trainops: %v\n%s", err, out)
	}
	return bin
}

// Eventually polls check until it returns nil, failing the test with the
// last error after timeout.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("not true after %s: %v", timeout, err)
}
