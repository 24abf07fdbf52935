package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// Golden holds got against the file at path: with update (a test's
// -update flag) it writes got there first. regenerate says how to rewrite
// the file on purpose.
func Golden(t testing.TB, path string, got []byte, update bool, regenerate string) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (%s)", err, regenerate)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Fatalf("%s differs (-file +got); %s if intended:\n%s", path, regenerate, d)
	}
}
