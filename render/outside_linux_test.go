// SPDX-License-Identifier: Apache-2.0

//go:build linux

package render_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/trainops/trainops/render"
)

// watchOpens reports the names of the files in dir opened since it was
// called, by inotify.
func watchOpens(t *testing.T, dir string) func() []string {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	return func() []string {
		var names []string
		buf := make([]byte, 64<<10)
		for {
			n, err := syscall.Read(fd, buf)
			if err != nil || n <= 0 {
				return names
			}
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
				if s := strings.TrimRight(string(name), "\x00"); s != "" {
					names = append(names, s)
				}
				off += syscall.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
}

// TestReadAheadOpensNothingThroughAFolderLink: a long resources list
// naming a regular file in a folder that is a symlink out of the
// repository is refused, and the file was never opened, not even to be
// read ahead.
func TestReadAheadOpensNothingThroughAFolderLink(t *testing.T) {
	top := t.TempDir()
	outside := filepath.Join(top, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "cm.yaml"), []byte(cmYAML("stolen")), 0o644); err != nil {
		t.Fatal(err)
	}
	files := longList("sub/cm.yaml")
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(top, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(top, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(top, "repo", "sub")); err != nil {
		t.Fatal(err)
	}
	opened := watchOpens(t, outside)
	objs, err := render.Render(filepath.Join(top, "repo"), ".")
	if err == nil || !strings.Contains(err.Error(), "symlink that leaves the repository") {
		t.Fatalf("rendered %s, error %v: want the link refused", ids(objs), err)
	}
	if got := opened(); len(got) != 0 {
		t.Fatalf("opened outside the repository: %v", got)
	}
	// The control: an open there is seen.
	if raw, err := os.ReadFile(filepath.Join(outside, "cm.yaml")); err != nil || len(raw) == 0 {
		t.Fatal(err)
	}
	if got := opened(); len(got) != 1 || got[0] != "cm.yaml" {
		t.Fatalf("the watch saw %v after the test opened cm.yaml", got)
	}
}
