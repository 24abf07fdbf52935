// SPDX-License-Identifier: Apache-2.0

package gitsource_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainops/trainops/gitsource"
)

// TestAdvanceMatchesAFreshExtract turns an extracted revision into the
// next one (files changed, removed and added, a folder become a file, a
// symlink) and wants exactly the files a fresh extract of it writes.
func TestAdvanceMatchesAFreshExtract(t *testing.T) {
	s := server(t)
	r := repo(t, s, "org/advance.git")
	for p, c := range map[string]string{"a.yaml": "v: 1\n", "dir/b.yaml": "v: 2\n", "dir/c.yaml": "v: 3\n", "swap/x.yaml": "v: 4\n"} {
		if err := r.Write(p, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.yaml", filepath.Join(r.Dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CommitAndPush("base"); err != nil {
		t.Fatal(err)
	}
	if err := r.Write("a.yaml", "v: 10\n"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"dir/b.yaml", "link.yaml"} {
		if err := r.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	// A folder becomes a file over two commits (go-git's work tree cannot
	// commit it in one); the advance spans both.
	if err := r.Remove("swap"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CommitAndPush("no swap folder"); err != nil {
		t.Fatal(err)
	}
	for p, c := range map[string]string{"new/d.yaml": "v: 5\n", "swap": "now a file\n"} {
		if err := r.Write(p, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("dir/c.yaml", filepath.Join(r.Dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CommitAndPush("head"); err != nil {
		t.Fatal(err)
	}
	local, err := gitsource.OpenLocal(r.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := local.Advance("HEAD", t.TempDir()); err == nil {
		t.Fatal("advanced a folder that holds no revision")
	}
	advanced, fresh := t.TempDir(), t.TempDir()
	if _, err := local.Extract("HEAD~2", advanced); err != nil {
		t.Fatal(err)
	}
	before := files(t, advanced)
	if _, err := local.Advance("HEAD", advanced); err != nil {
		t.Fatal(err)
	}
	if _, err := local.Extract("HEAD", fresh); err != nil {
		t.Fatal(err)
	}
	got, want := files(t, advanced), files(t, fresh)
	if got != want || got == before {
		t.Fatalf("advanced:\n%s\nfresh extract:\n%s\nbefore:\n%s", got, want, before)
	}
	for _, w := range []string{"swap = now a file", "link.yaml -> dir/c.yaml", "new/d.yaml = v: 5", "a.yaml = v: 10"} {
		if !strings.Contains(got, w) {
			t.Errorf("no %q in\n%s", w, got)
		}
	}

	// A file past the per-file limit in the next revision is refused by
	// its header, and the folder can no longer be advanced.
	if err := os.WriteFile(filepath.Join(r.Dir, "big.bin"), make([]byte, 9<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CommitAndPush("big"); err != nil {
		t.Fatal(err)
	}
	if _, err := local.Advance("HEAD", advanced); err == nil || !strings.Contains(err.Error(), "big.bin: larger than 8 MiB") {
		t.Fatalf("advance to a revision with a 9 MiB file: %v", err)
	}
}

// files lists the files under dir, each with its content or link target.
func files(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			b.WriteString(rel + " -> " + target + "\n")
			return err
		}
		c, err := os.ReadFile(p)
		b.WriteString(rel + " = " + strings.TrimSpace(string(c)) + "\n")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestFetchWritesTheNewRevisionFromTheLast fetches a revision, then one
// that changes, removes and adds files: its files are those of a fresh
// clone, made from the last revision's (an unchanged file is the same
// file, not written again), and the last revision's folder is gone.
func TestFetchWritesTheNewRevisionFromTheLast(t *testing.T) {
	s := server(t)
	r := repo(t, s, "org/fetch-advance.git")
	for p, c := range map[string]string{"a.yaml": "v: 1\n", "dir/b.yaml": "v: 2\n", "keep/c.yaml": "v: 3\n"} {
		if err := r.Write(p, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.CommitAndPush("base"); err != nil {
		t.Fatal(err)
	}
	opts := gitsource.Options{URL: s.URL("org/fetch-advance.git"), Auth: gitsource.Auth{Username: user, Password: password}, TreeDir: t.TempDir()}
	src := source(t, opts)
	first, err := src.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	kept, err := os.Stat(filepath.Join(first.Dir, "keep/c.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Write("a.yaml", "v: 10\n"); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove("dir"); err != nil {
		t.Fatal(err)
	}
	if err := r.Write("new/d.yaml", "v: 4\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CommitAndPush("head"); err != nil {
		t.Fatal(err)
	}
	second, err := src.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if second.Revision == first.Revision {
		t.Fatal("the second fetch found no new revision")
	}
	if _, err := os.Stat(first.Dir); !os.IsNotExist(err) {
		t.Errorf("the last revision's folder %s is still there: %v", first.Dir, err)
	}
	fresh, err := source(t, gitsource.Options{URL: opts.URL, Auth: opts.Auth, TreeDir: t.TempDir()}).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := files(t, second.Dir), files(t, fresh.Dir); got != want || !strings.Contains(got, "a.yaml = v: 10") || strings.Contains(got, "dir/") {
		t.Fatalf("made from the last revision:\n%s\nfresh clone:\n%s", got, want)
	}
	now, err := os.Stat(filepath.Join(second.Dir, "keep/c.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(kept, now) {
		t.Error("an unchanged file was written again: the revision was extracted whole")
	}
}

// TestExtractWritesEveryFileOrFails extracts a revision of 300 small
// files, written on every core, and a large one, streamed: each file is
// there with its content; and where a file cannot be written (the folder
// it goes in is a file in dest), the extraction fails naming it rather
// than leaving a partial tree behind a nil error.
func TestExtractWritesEveryFileOrFails(t *testing.T) {
	s := server(t)
	r := repo(t, s, "org/extract.git")
	var want strings.Builder
	want.WriteString("README.md = # training config\n") // the repository's first commit
	for i := range 300 {
		p := fmt.Sprintf("jobs/%03d/job.yaml", i)
		if err := r.Write(p, fmt.Sprintf("v: %d\n", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 {
		fmt.Fprintf(&want, "jobs/%03d/job.yaml = v: %d\n", i, i)
	}
	// A file past what is queued for the writers is streamed by the reader.
	big := "v: " + strings.Repeat("x", 300<<10)
	if err := r.Write("large.yaml", big+"\n"); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&want, "large.yaml = %s\n", big)
	if _, err := r.CommitAndPush("many"); err != nil {
		t.Fatal(err)
	}
	local, err := gitsource.OpenLocal(r.Dir)
	if err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	if _, err := local.Extract("HEAD", dest); err != nil {
		t.Fatal(err)
	}
	if got := files(t, dest); got != want.String() {
		t.Fatalf("extracted:\n%s", got)
	}

	// A file in the middle (later files see the failure) and the last one
	// (only the wait for the writers does).
	for _, at := range []string{"jobs/150", "jobs/299"} {
		blocked := t.TempDir()
		if err := os.MkdirAll(filepath.Join(blocked, "jobs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(blocked, at), []byte("a file"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := local.Extract("HEAD", blocked); err == nil || !strings.Contains(err.Error(), at) {
			t.Fatalf("extract over a file where the folder %s goes: %v", at, err)
		}
	}
}
