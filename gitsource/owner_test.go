// SPDX-License-Identifier: Apache-2.0

package gitsource

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainops/trainops/internal/gitserver"
)

func TestPrivateDir(t *testing.T) {
	base := t.TempDir()
	private := filepath.Join(base, "private")
	open := filepath.Join(base, "open")
	link := filepath.Join(base, "link")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(private, link); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{private: true, open: false, link: false, filepath.Join(base, "missing"): false} {
		if got := privateDir(path); got != want {
			t.Errorf("privateDir(%s) = %v, want %v", filepath.Base(path), got, want)
		}
	}
}

// TestForeignTreeFolderIsNotUsed checks that when the in-memory folder for
// revision files is not one this user alone controls (here a symlink to
// another folder, as another user of the machine could plant), the files
// go to the cache folder instead, and nothing is written through the link.
func TestForeignTreeFolderIsNotUsed(t *testing.T) {
	srv, err := gitserver.Start("", "")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	r, err := srv.NewRepo("foreign.git", "main", "")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Write("a.yaml", "v: 1\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CommitAndPush("one"); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	s, err := New(Options{URL: srv.URL("foreign.git"), CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	elsewhere := t.TempDir()
	s.trees, s.inMemory = filepath.Join(t.TempDir(), "planted"), true
	if err := os.Symlink(elsewhere, s.trees); err != nil {
		t.Fatal(err)
	}
	co, err := s.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(co.Dir, cache+string(filepath.Separator)) {
		t.Fatalf("files in %s, want them in the cache %s", co.Dir, cache)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("wrote %d entries through the planted link", len(entries))
	}
}

// TestOrphanTreesAreSwept checks that the folders of revision files whose
// cache folder is gone (a killed process's, for a deleted cache) are
// removed, and those of a cache that still exists, or of another user, are
// kept.
func TestOrphanTreesAreSwept(t *testing.T) {
	shm, live := t.TempDir(), t.TempDir()
	orphan := filepath.Join(shm, treesPrefix+"orphan")
	kept := filepath.Join(shm, treesPrefix+"kept")
	foreign := filepath.Join(shm, treesPrefix+"foreign")
	for dir, owner := range map[string]string{orphan: filepath.Join(live, "deleted-cache"), kept: live, foreign: filepath.Join(live, "gone")} {
		if err := os.MkdirAll(filepath.Join(dir, "0123abcd"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(foreign, 0o755); err != nil { // not private: not ours to judge
		t.Fatal(err)
	}
	sweepOrphanTrees(shm)
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("the orphan's files are still there: %v", err)
	}
	for _, dir := range []string{kept, foreign} {
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("%s was removed: %v", filepath.Base(dir), err)
		}
	}
}
