// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// FilesUnder lists everything beneath dir (dir itself aside): what a test
// of "nothing was written there" expects to be empty.
func FilesUnder(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil && p != dir {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// CloneConfigs is the configuration file of every bare clone (a folder
// repo.git) beneath dir, each after its path: what a test of "a clone's
// configuration did not change" compares.
func CloneConfigs(dir string) string {
	var b strings.Builder
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "repo.git" {
			raw, _ := os.ReadFile(filepath.Join(p, "config"))
			b.WriteString(p + "\n" + string(raw))
		}
		return nil
	})
	return b.String()
}
