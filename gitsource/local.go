// SPDX-License-Identifier: Apache-2.0

package gitsource

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/trainops/trainops/internal/limits"
)

// SizeError is a revision refused for its size: one file past
// limits.FileBytes, or its files past the revision's bound in all.
type SizeError struct {
	// File is the file, or the file that took the total past Limit.
	File  string
	Size  int64
	Limit int64
	Total bool
}

func (e *SizeError) Error() string {
	if e.Total {
		return fmt.Sprintf("the revision's files add up to more than %d MiB (reached at %s; render.maxBytes): nothing of it is used", e.Limit>>20, e.File)
	}
	return fmt.Sprintf("%s: larger than %d MiB (%d MiB): nothing of the revision is used", e.File, e.Limit>>20, e.Size>>20)
}

// Local is a repository on disk, read without touching its work tree.
type Local struct {
	repo *git.Repository
	// Root is the work tree's root.
	Root string
	// extracted is the revision Extract or Advance last wrote, by folder.
	extracted map[string]extracted
}

// OpenLocal opens the repository holding dir. Objects past
// limits.FileBytes are opened lazily, so Extract sizes them from their
// headers without reading them.
func OpenLocal(dir string) (*Local, error) {
	r, err := git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{DetectDotGit: true})
	if err != nil {
		return nil, fmt.Errorf("%s is not in a Git repository: %w", dir, err)
	}
	wt, err := r.Worktree()
	if err != nil {
		return nil, err
	}
	root := wt.Filesystem.Root()
	if info, err := os.Stat(filepath.Join(root, ".git")); err == nil && info.IsDir() {
		// A plain .git folder (not a linked work tree's .git file).
		st := filesystem.NewStorageWithOptions(osfs.New(filepath.Join(root, ".git")), cache.NewObjectLRUDefault(), filesystem.Options{LargeObjectThreshold: limits.FileBytes})
		if lr, err := git.Open(st, wt.Filesystem); err == nil {
			r = lr
		}
	}
	return &Local{repo: r, Root: root}, nil
}

// DefaultBase is the current branch's upstream, else main (local or
// origin's).
func (l *Local) DefaultBase() (string, error) {
	head, err := l.repo.Head()
	if err == nil && head.Name().IsBranch() {
		if cfg, err := l.repo.Config(); err == nil {
			if b, ok := cfg.Branches[head.Name().Short()]; ok && b.Remote != "" && b.Merge != "" {
				up := "refs/remotes/" + b.Remote + "/" + b.Merge.Short()
				if _, err := l.repo.Reference(plumbing.ReferenceName(up), true); err == nil {
					return up, nil
				}
			}
		}
	}
	for _, ref := range []string{"refs/heads/main", "refs/remotes/origin/main"} {
		if _, err := l.repo.Reference(plumbing.ReferenceName(ref), true); err == nil {
			return ref, nil
		}
	}
	return "", errors.New("no upstream branch and no main branch: name the base with --base")
}

// Extract writes the files of rev (a branch, tag, commit or ref) into dest
// and returns the commit, within the default size limits. The work tree is
// not touched.
func (l *Local) Extract(rev, dest string) (string, error) {
	h, err := l.repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return "", fmt.Errorf("revision %q: %w", rev, err)
	}
	total, err := extractCommit(l.repo, *h, dest, limits.RevisionBytes)
	if err != nil {
		return "", fmt.Errorf("revision %s: %w", rev, err)
	}
	l.remember(dest, *h, total)
	return h.String(), nil
}

// remember records the revision dest holds.
func (l *Local) remember(dest string, h plumbing.Hash, total int64) {
	if l.extracted == nil {
		l.extracted = map[string]extracted{}
	}
	l.extracted[dest] = extracted{commit: h, total: total}
}

// Advance turns dest, where Extract (or Advance) last wrote a revision,
// into the files of rev, writing and removing only the files that differ
// (found by comparing the two trees, whose unchanged folders are skipped
// by their hashes), within the same limits; it returns rev's commit. A
// diff of two revisions of a large repository extracts it once.
func (l *Local) Advance(rev, dest string) (string, error) {
	from, ok := l.extracted[dest]
	if !ok {
		return "", fmt.Errorf("%s holds no revision extracted from this repository", dest)
	}
	delete(l.extracted, dest)
	h, err := l.repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return "", fmt.Errorf("revision %q: %w", rev, err)
	}
	total, err := advance(l.repo, from, *h, dest, limits.RevisionBytes)
	if err != nil {
		return "", fmt.Errorf("revision %s: %w", rev, err)
	}
	l.remember(dest, *h, total)
	return h.String(), nil
}

// extracted is the revision a folder holds, and its files' size in all.
type extracted struct {
	commit plumbing.Hash
	total  int64
}

// advance turns dest, holding the files of from, into those of commit to,
// within maxBytes in all, and returns their size in all. The new tree is
// checked (checkTree) before any file changes, its folders unchanged since
// from skipped, and every change is made through dest's os.Root.
func advance(repo *git.Repository, from extracted, to plumbing.Hash, dest string, maxBytes int64) (int64, error) {
	trees := make([]*object.Tree, 2)
	for i, h := range []plumbing.Hash{from.commit, to} {
		c, err := repo.CommitObject(h)
		if err != nil {
			return 0, err
		}
		if trees[i], err = c.Tree(); err != nil {
			return 0, err
		}
	}
	if err := checkTree(repo, trees[1], trees[0]); err != nil {
		return 0, err
	}
	changes, err := object.DiffTree(trees[0], trees[1])
	if err != nil {
		return 0, err
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	total := from.total
	for _, c := range changes {
		if c.From.Name != "" {
			if b, err := repo.BlobObject(c.From.TreeEntry.Hash); err == nil {
				total -= b.Size
			}
			if err := root.Remove(filepath.FromSlash(c.From.Name)); err != nil && !os.IsNotExist(err) {
				return 0, err
			}
		}
	}
	for _, c := range changes {
		if c.To.Name == "" || c.To.TreeEntry.Mode == filemode.Submodule {
			continue
		}
		b, err := repo.BlobObject(c.To.TreeEntry.Hash)
		if err != nil {
			return 0, err
		}
		if b.Size > limits.FileBytes {
			return 0, &SizeError{File: c.To.Name, Size: b.Size, Limit: limits.FileBytes}
		}
		if total += b.Size; total > maxBytes {
			return 0, &SizeError{File: c.To.Name, Size: total, Limit: maxBytes, Total: true}
		}
		// A folder the base had where the head has a file: its files
		// are gone (above), the folder goes too.
		if info, err := root.Lstat(filepath.FromSlash(c.To.Name)); err == nil && info.IsDir() {
			if err := root.RemoveAll(filepath.FromSlash(c.To.Name)); err != nil {
				return 0, err
			}
		}
		if err := writeBlob(root, c.To.Name, c.To.TreeEntry.Mode, b); err != nil {
			return 0, err
		}
	}
	return total, nil
}

// extractCommit writes the files of commit h into dest and returns their
// size in all. The tree is checked first (checkTree): a revision with an
// entry that could be written outside dest, or through a symlink, writes
// nothing. Each file's size is read from its object's header before its
// content is: a file past limits.FileBytes, or files past maxBytes in all,
// fail the revision without being read. The objects are read in order (a
// go-git repository is not safe for concurrent reads) and files up to
// queuedMax written on every core, all through dest's os.Root.
func extractCommit(repo *git.Repository, h plumbing.Hash, dest string, maxBytes int64) (int64, error) {
	commit, err := repo.CommitObject(h)
	if err != nil {
		return 0, err
	}
	tree, err := commit.Tree()
	if err != nil {
		return 0, err
	}
	if err := checkTree(repo, tree, nil); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return 0, err
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	w := newWriters(root)
	var total int64
	err = tree.Files().ForEach(func(f *object.File) error {
		if f.Size > limits.FileBytes {
			return &SizeError{File: f.Name, Size: f.Size, Limit: limits.FileBytes}
		}
		if total += f.Size; total > maxBytes {
			return &SizeError{File: f.Name, Size: total, Limit: maxBytes, Total: true}
		}
		if (f.Mode != filemode.Regular && f.Mode != filemode.Executable) || f.Size > queuedMax {
			return writeBlob(root, f.Name, f.Mode, &f.Blob)
		}
		raw, err := readBlob(f.Name, &f.Blob)
		if err != nil {
			return err
		}
		return w.write(f.Name, raw)
	})
	return total, errors.Join(err, w.wait())
}

// queuedMax is the largest file handed to the writers: a larger one is
// streamed to its file by the reader, so the bytes read and not yet
// written stay under (writers + queue) × queuedMax.
const queuedMax = 256 << 10

// writers write files under root on every core, keeping the first error.
type writers struct {
	root  *os.Root
	files chan blobFile
	done  sync.WaitGroup
	mu    sync.Mutex
	err   error
}

type blobFile struct {
	name string
	raw  []byte
}

func newWriters(root *os.Root) *writers {
	w := &writers{root: root, files: make(chan blobFile, 2*runtime.GOMAXPROCS(0))}
	for range runtime.GOMAXPROCS(0) {
		w.done.Go(func() {
			for f := range w.files {
				if err := writeFile(w.root, f.name, f.raw); err != nil {
					w.mu.Lock()
					w.err = cmp.Or(w.err, err)
					w.mu.Unlock()
				}
			}
		})
	}
	return w
}

// write queues a file, or returns a writer's error: the extraction stops
// at the first.
func (w *writers) write(name string, raw []byte) error {
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		return err
	}
	w.files <- blobFile{name, raw}
	return nil
}

// wait waits for every queued file and returns the first error.
func (w *writers) wait() error {
	close(w.files)
	w.done.Wait()
	return w.err
}

// readBlob reads a file's content, within limits.FileBytes whatever its
// header said.
func readBlob(name string, b *object.Blob) ([]byte, error) {
	r, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	raw, err := io.ReadAll(io.LimitReader(r, limits.FileBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > limits.FileBytes {
		return nil, &SizeError{File: name, Size: int64(len(raw)), Limit: limits.FileBytes}
	}
	return raw, nil
}

// writeFile writes a regular file of a revision beneath root.
func writeFile(root *os.Root, name string, raw []byte) error {
	out, err := createFile(root, name)
	if err != nil {
		return err
	}
	if _, err := out.Write(raw); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// createFile creates the file name of a revision beneath root, its folder
// made. It must not exist: O_EXCL never opens an existing file or follows
// a symlink in its place. The root refuses any path that would leave it,
// whatever symlinks are on disk; checkTree has already refused every tree
// in which a path could pass through one.
func createFile(root *os.Root, name string) (*os.File, error) {
	p := filepath.FromSlash(name)
	if dir := filepath.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	return root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
}

// writeBlob writes the file name of a revision, of the given mode, beneath
// root; a file past limits.FileBytes is refused by its header, unread.
func writeBlob(root *os.Root, name string, mode filemode.FileMode, b *object.Blob) error {
	if b.Size > limits.FileBytes {
		return &SizeError{File: name, Size: b.Size, Limit: limits.FileBytes}
	}
	switch mode {
	case filemode.Submodule:
		return nil
	case filemode.Symlink:
		target, err := readBlob(name, b)
		if err != nil {
			return err
		}
		// checkTree has held the target to the checkout.
		if reason := symlinkTargetReason(name, string(target)); reason != "" {
			return &TreeEntryError{Path: name, Reason: reason}
		}
		p := filepath.FromSlash(name)
		if dir := filepath.Dir(p); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		return root.Symlink(string(target), p)
	}
	r, err := b.Reader()
	if err != nil {
		return err
	}
	defer r.Close()
	out, err := createFile(root, name)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
