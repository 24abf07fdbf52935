// SPDX-License-Identifier: Apache-2.0

//go:build unix

package render_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/trainops/trainops/render"
)

// watchFIFO makes path a named pipe and reports whether anything opened
// it: opening a pipe for writing waits for a reader, so the writer below
// returns only if something read, or tried to read, the file.
func watchFIFO(t *testing.T, path string) func() bool {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	var opened atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err == nil {
			opened.Store(true)
			_, _ = f.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stolen\n")
			_ = f.Close()
		}
	}()
	t.Cleanup(func() {
		// Release the writer.
		if r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			<-done
			_ = r.Close()
		}
	})
	return opened.Load
}

// TestNothingOutsideTheRepositoryIsOpened points every way out of the
// repository at a named pipe outside it, which records being opened: each
// render is refused, and the pipe was never opened.
func TestNothingOutsideTheRepositoryIsOpened(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		link  string // a symlink at this path to the pipe
		// dirLink is a symlink at this path to the pipe's folder.
		dirLink string
		want    string
	}{
		{"resource with ..", map[string]string{"repo/kustomization.yaml": "resources:\n- ../outside/pipe.yaml\n"}, "", "", "leaves the repository"},
		{"absolute resource", map[string]string{"repo/kustomization.yaml": "resources:\n- ABS\n"}, "", "", "absolute path"},
		{"patch with ..", map[string]string{"repo/kustomization.yaml": "patches:\n- path: ../outside/pipe.yaml\n"}, "", "", "leaves the repository"},
		{"generator file with ..", map[string]string{"repo/kustomization.yaml": "configMapGenerator:\n- name: g\n  files:\n  - ../outside/pipe.yaml\n"}, "", "", "leaves the repository"},
		{"kustomization.yaml a symlink out", nil, "repo/kustomization.yaml", "", "symlink that leaves the repository"},
		{"resource a symlink out", map[string]string{"repo/kustomization.yaml": "resources:\n- link.yaml\n"}, "repo/link.yaml", "", "symlink that leaves the repository"},
		{"plain file a symlink out", map[string]string{"repo/a.yaml": cmYAML("a")}, "repo/link.yaml", "", "symlink that leaves the repository"},
		// Lists long enough to be read ahead on every core.
		{"long list, resource with ..", longList("../outside/pipe.yaml"), "", "", "leaves the repository"},
		{"long list, absolute resource", longList("ABS"), "", "", "absolute path"},
		{"long list, resource a symlink out", longList("link.yaml"), "repo/link.yaml", "", "symlink that leaves the repository"},
		{"long list, resource in a folder that is a symlink out", longList("sub/pipe.yaml"), "", "repo/sub", "symlink that leaves the repository"},
		{"long list, resource in a folder, then ..", longList("sub/../../outside/pipe.yaml"), "", "", "leaves the repository"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			top := tree(t, nil)
			pipe := filepath.Join(top, "outside", "pipe.yaml")
			if err := os.MkdirAll(filepath.Dir(pipe), 0o755); err != nil {
				t.Fatal(err)
			}
			opened := watchFIFO(t, pipe)
			if err := os.MkdirAll(filepath.Join(top, "repo"), 0o755); err != nil {
				t.Fatal(err)
			}
			for p, c := range tc.files {
				if err := os.WriteFile(filepath.Join(top, p), []byte(strings.ReplaceAll(c, "ABS", pipe)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.link != "" {
				if err := os.Symlink(pipe, filepath.Join(top, tc.link)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.dirLink != "" {
				if err := os.Symlink(filepath.Dir(pipe), filepath.Join(top, tc.dirLink)); err != nil {
					t.Fatal(err)
				}
			}
			objs, err := render.Render(filepath.Join(top, "repo"), ".")
			if err == nil {
				t.Fatalf("rendered %s", ids(objs))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
			if opened() {
				t.Error("the file outside the repository was opened")
			}
		})
	}
}

// longList is a repository whose kustomization lists 40 files, last of
// them entry.
func longList(entry string) map[string]string {
	files := map[string]string{}
	k := "resources:\n"
	for i := range 40 {
		name := fmt.Sprintf("cm-%02d.yaml", i)
		files["repo/"+name] = cmYAML(fmt.Sprintf("cm-%02d", i))
		k += "- " + name + "\n"
	}
	files["repo/kustomization.yaml"] = k + "- " + entry + "\n"
	return files
}

// TestWatchFIFOSeesAnOpen is the control: a pipe the render does read is
// seen opened, so the test above would see a read outside the repository.
func TestWatchFIFOSeesAnOpen(t *testing.T) {
	root := tree(t, nil)
	opened := watchFIFO(t, filepath.Join(root, "pipe.yaml"))
	objs, err := render.Render(root, ".")
	if err != nil {
		t.Fatal(err)
	}
	if !opened() || ids(objs) != "ConfigMap stolen@pipe.yaml" {
		t.Fatalf("opened %v, rendered %s", opened(), ids(objs))
	}
}
