// SPDX-License-Identifier: Apache-2.0

package gitserver

import (
	"fmt"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Entry is one entry of a crafted tree, written as given: any name
// (separators, "..", ".git", repeats), any mode, any order. A file or
// symlink holds Content (a symlink's target); a folder holds Entries.
type Entry struct {
	Name    string
	Mode    filemode.FileMode
	Content string
	Entries []Entry
}

// File is a regular file entry.
func File(name, content string) Entry {
	return Entry{Name: name, Mode: filemode.Regular, Content: content}
}

// Symlink is a symlink entry.
func Symlink(name, target string) Entry {
	return Entry{Name: name, Mode: filemode.Symlink, Content: target}
}

// Folder is a folder entry.
func Folder(name string, entries ...Entry) Entry {
	return Entry{Name: name, Mode: filemode.Dir, Entries: entries}
}

// CommitTree makes a commit of a tree built exactly of entries on branch
// of repository name on the server, on top of the branch's head, as a push
// from a hostile team leaves it: trees that Git's own commands refuse to
// make (and a server without fsck accepts, the default), including trees
// no Git client can even send. It returns the commit. A working copy of
// the repository is then behind: its AmendAndForcePush replaces the commit.
func (s *Server) CommitTree(name, branch, msg string, entries []Entry) (string, error) {
	repo, err := git.PlainOpen(s.RepoDir(name))
	if err != nil {
		return "", err
	}
	st := objectStore{repo}
	tree, err := st.storeTree(entries)
	if err != nil {
		return "", err
	}
	ref := plumbing.NewBranchReferenceName(branch)
	head, err := repo.Reference(ref, true)
	if err != nil {
		return "", err
	}
	sig := object.Signature{Name: "trainops test", Email: "test@trainops.dev", When: time.Now()}
	c := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: tree, ParentHashes: []plumbing.Hash{head.Hash()}}
	obj := repo.Storer.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return "", err
	}
	h, err := repo.Storer.SetEncodedObject(obj)
	if err != nil {
		return "", err
	}
	if err := repo.Storer.SetReference(plumbing.NewHashReference(ref, h)); err != nil {
		return "", err
	}
	return h.String(), nil
}

// objectStore writes raw objects into a repository.
type objectStore struct{ repo *git.Repository }

// storeTree writes entries as one tree object, byte for byte in the given
// order (go-git's encoder would sort them and refuse some names).
func (r objectStore) storeTree(entries []Entry) (plumbing.Hash, error) {
	var raw []byte
	for _, e := range entries {
		var h plumbing.Hash
		var err error
		if e.Mode == filemode.Dir {
			h, err = r.storeTree(e.Entries)
		} else {
			h, err = r.storeBlob(e.Content)
		}
		if err != nil {
			return plumbing.ZeroHash, err
		}
		raw = fmt.Appendf(raw, "%o %s", uint32(e.Mode), e.Name)
		raw = append(raw, 0)
		raw = append(raw, h[:]...)
	}
	return r.storeRaw(plumbing.TreeObject, raw)
}

func (r objectStore) storeBlob(content string) (plumbing.Hash, error) {
	return r.storeRaw(plumbing.BlobObject, []byte(content))
}

func (r objectStore) storeRaw(t plumbing.ObjectType, raw []byte) (plumbing.Hash, error) {
	obj := r.repo.Storer.NewEncodedObject()
	obj.SetType(t)
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(raw); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return r.repo.Storer.SetEncodedObject(obj)
}
