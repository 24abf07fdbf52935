package gitsource

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
	if err := extractCommit(l.repo, *h, dest, limits.RevisionBytes); err != nil {
		return "", fmt.Errorf("revision %s: %w", rev, err)
	}
	return h.String(), nil
}

// extractCommit writes the files of commit h into dest. Each file's size
// is read from its object's header before its content is: a file past
// limits.FileBytes, or files past maxBytes in all, fail the revision
// without being read.
func extractCommit(repo *git.Repository, h plumbing.Hash, dest string, maxBytes int64) error {
	commit, err := repo.CommitObject(h)
	if err != nil {
		return err
	}
	tree, err := commit.Tree()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	var total int64
	return tree.Files().ForEach(func(f *object.File) error {
		if strings.Contains(f.Name, "..") {
			return fmt.Errorf("refusing path %q", f.Name)
		}
		if f.Size > limits.FileBytes {
			return &SizeError{File: f.Name, Size: f.Size, Limit: limits.FileBytes}
		}
		if total += f.Size; total > maxBytes {
			return &SizeError{File: f.Name, Size: total, Limit: maxBytes, Total: true}
		}
		p := filepath.Join(dest, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		switch f.Mode {
		case filemode.Symlink:
			target, err := f.Contents()
			if err != nil {
				return err
			}
			return os.Symlink(target, p)
		case filemode.Submodule:
			return nil
		}
		r, err := f.Reader()
		if err != nil {
			return err
		}
		defer r.Close()
		out, err := os.Create(p)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, r); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
