// SPDX-License-Identifier: Apache-2.0

package gitsource

import (
	"fmt"
	"strings"
	"unicode/utf8"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Bounds on a tree's shape: deeper folders or longer paths than any
// training-config repository needs are refused before anything is written.
const (
	maxTreeDepth = 64
	maxPathBytes = 1024
)

// TreeEntryError is a revision refused for one entry of its tree: a name
// Git itself would not check out, a repeated name, an unknown mode, or a
// symlink whose target leaves the checkout. It names the entry by its path
// in the repository and never a path on trainops's own filesystem.
type TreeEntryError struct {
	// Path is the entry's path in the revision (its folder's path, then the
	// name as stored, quoted).
	Path   string
	Reason string
}

func (e *TreeEntryError) Error() string {
	return fmt.Sprintf("tree entry %q: %s: nothing of the revision is used", e.Path, e.Reason)
}

// checkTree refuses tree unless every entry beneath it can be written
// beneath the checkout, and nothing written through a symlink: each name
// is one path component Git would check out (no "/", "\", NUL, "." or
// "..", no ".git" in any spelling NTFS or HFS+ folds to it), unique in its
// folder, of a known mode; a symlink's target is relative and stays inside
// the checkout however the symlinks it passes through resolve. Since every
// name is a single, unique component, a symlink is always a leaf: no other
// entry's path passes through it.
//
// base, when not nil, is a tree already checked (the revision the checkout
// holds): a folder whose hash and place equal base's is not read again.
func checkTree(repo *git.Repository, tree, base *object.Tree) error {
	return checkFolder(repo, tree, base, "", 0)
}

func checkFolder(repo *git.Repository, tree, base *object.Tree, dir string, depth int) error {
	if depth > maxTreeDepth {
		return &TreeEntryError{Path: dir, Reason: fmt.Sprintf("folders nested deeper than %d", maxTreeDepth)}
	}
	var old map[string]object.TreeEntry
	if base != nil {
		old = make(map[string]object.TreeEntry, len(base.Entries))
		for _, e := range base.Entries {
			old[e.Name] = e
		}
	}
	seen := make(map[string]struct{}, len(tree.Entries))
	for _, e := range tree.Entries {
		p := dirPlus(dir, e.Name)
		if err := checkName(e.Name); err != "" {
			return &TreeEntryError{Path: p, Reason: err}
		}
		if _, dup := seen[e.Name]; dup {
			return &TreeEntryError{Path: p, Reason: "the name appears twice in its folder"}
		}
		seen[e.Name] = struct{}{}
		if len(p) > maxPathBytes {
			return &TreeEntryError{Path: p[:maxPathBytes] + "…", Reason: fmt.Sprintf("path longer than %d bytes", maxPathBytes)}
		}
		prev, had := old[e.Name]
		unchanged := had && prev.Hash == e.Hash && prev.Mode == e.Mode
		switch e.Mode {
		case filemode.Regular, filemode.Executable, filemode.Deprecated, filemode.Submodule:
		case filemode.Dir:
			if unchanged {
				continue
			}
			sub, err := repo.TreeObject(e.Hash)
			if err != nil {
				return fmt.Errorf("folder %q: %w", p, err)
			}
			var subBase *object.Tree
			if had && prev.Mode == filemode.Dir {
				if subBase, err = repo.TreeObject(prev.Hash); err != nil {
					subBase = nil
				}
			}
			if err := checkFolder(repo, sub, subBase, p, depth+1); err != nil {
				return err
			}
		case filemode.Symlink:
			if special := isGitSpecial(e.Name); special != "" {
				return &TreeEntryError{Path: p, Reason: "a symlink named " + special + ", which Git refuses"}
			}
			if unchanged {
				continue
			}
			if err := checkSymlink(repo, e, p); err != nil {
				return err
			}
		default:
			return &TreeEntryError{Path: p, Reason: fmt.Sprintf("mode %o is not a file, folder, symlink or submodule", uint32(e.Mode))}
		}
	}
	return nil
}

// dirPlus quotes a refused name after its folder: the name may hold "/" or
// NUL, which path.Join would hide or fold.
func dirPlus(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// checkName says why Git would refuse name as one tree entry, or "".
// It follows git's verify_path and fsck: NTFS and HFS+ spellings of .git
// are refused on every system, as a clone may be copied to one.
func checkName(name string) string {
	switch {
	case name == "":
		return "an empty name"
	case strings.ContainsAny(name, "/\\"):
		return "a name holding a path separator"
	case strings.IndexByte(name, 0) >= 0:
		return "a name holding a NUL byte"
	case !utf8.ValidString(name):
		return "a name that is not valid UTF-8"
	case name == "." || name == "..":
		return "a name that is . or .."
	case isGitSpecial(name) == ".git":
		return "a name Git reserves for its own folder (.git)"
	}
	return ""
}

// isGitSpecial is the special name (".git", ".gitmodules", ".gitattributes",
// ".gitignore", ".mailmap") that name folds to on NTFS or HFS+, or "".
// NTFS drops trailing dots and spaces and knows 8.3 short names; HFS+
// ignores some zero-width code points; both fold case.
func isGitSpecial(name string) string {
	n := strings.Map(func(r rune) rune {
		if hfsIgnorable(r) {
			return -1
		}
		return r
	}, name)
	n = strings.ToLower(strings.TrimRight(n, ". "))
	switch n {
	case ".git", "git~1":
		return ".git"
	case ".gitmodules", "gitmod~1":
		return ".gitmodules"
	case ".gitattributes", "gitatt~1":
		return ".gitattributes"
	case ".gitignore", "gitign~1":
		return ".gitignore"
	case ".mailmap", "mailma~1":
		return ".mailmap"
	}
	return ""
}

// hfsIgnorable is a code point HFS+ drops when comparing names (git's
// next_hfs_char).
func hfsIgnorable(r rune) bool {
	switch {
	case r >= 0x200c && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x206a && r <= 0x206f, r == 0xfeff:
		return true
	}
	return false
}

// checkSymlink refuses a symlink whose target could leave the checkout: the
// target must be relative, made of ".." components first and then none
// (a ".." after a name would climb out of wherever that name, perhaps a
// symlink, leads), climbing no higher than the checkout's root. Every
// folder the link sits in is a real folder (no path passes through a
// symlink), so the climb ends inside the checkout; the rest descends, and a
// symlink on the way is held to the same rule.
func checkSymlink(repo *git.Repository, e object.TreeEntry, p string) error {
	b, err := repo.BlobObject(e.Hash)
	if err != nil {
		return fmt.Errorf("symlink %q: %w", p, err)
	}
	if b.Size > maxPathBytes {
		return &TreeEntryError{Path: p, Reason: fmt.Sprintf("a symlink whose target is longer than %d bytes", maxPathBytes)}
	}
	raw, err := readBlob(p, b)
	if err != nil {
		return err
	}
	target := string(raw)
	if reason := symlinkTargetReason(p, target); reason != "" {
		return &TreeEntryError{Path: p, Reason: reason}
	}
	return nil
}

// symlinkTargetReason says why the symlink at p (a path in the checkout)
// may not point at target, or "".
func symlinkTargetReason(p, target string) string {
	switch {
	case target == "":
		return "a symlink with an empty target"
	case strings.IndexByte(target, 0) >= 0:
		return "a symlink whose target holds a NUL byte"
	case strings.HasPrefix(target, "/"):
		return "a symlink to an absolute path"
	}
	depth := strings.Count(p, "/")
	climbing := true
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if !climbing {
				return "a symlink whose target has .. after a name"
			}
			if depth--; depth < 0 {
				return "a symlink that leaves the repository"
			}
		default:
			climbing = false
			if isGitSpecial(c) == ".git" {
				return "a symlink into .git"
			}
		}
	}
	return ""
}
