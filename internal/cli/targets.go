// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/offline"
	"github.com/trainops/trainops/render"
)

// target is one thing validate and render read on their own: the
// repository's folder (root, path) as a sync renders it, one kustomization
// root in it, or one file. label names it in per-root output ("" for the
// only one).
type target struct {
	root, path, label string
}

// open makes the loader and resolves the targets of validate or render.
func (f *offlineFlags) open(args []string, all bool) (*offline.Loader, []target, error) {
	l, err := f.loader()
	if err != nil {
		return nil, nil, err
	}
	ts, err := f.targets(args, all)
	if err != nil {
		return nil, nil, &exitError{code: ExitUsage, msg: "Error: " + err.Error()}
	}
	return l, ts, nil
}

// targets resolves validate's and render's argument (default .): a file
// is read alone, as kubectl reads it; a folder with a kustomization file
// (or no kustomization below it) is rendered as a sync would render it; a
// folder without one, but with kustomizations below it, is each of those
// on its own, as Flux treats such a folder (so examples/ validates its
// base and both overlays). With all, every kustomization root under the
// argument is a target. The folder is read as part of the repository it
// is in (repositoryOf), so an overlay reaching ../base works as in a sync.
func (f *offlineFlags) targets(args []string, all bool) ([]target, error) {
	arg := "."
	if len(args) == 1 {
		arg = args[0]
	}
	st, err := os.Stat(arg)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []target{{root: filepath.Dir(arg), path: filepath.Base(arg)}}, nil
	}
	// The repository is the Git work tree arg is in (or the current
	// folder, or arg itself): an overlay's ../base is inside it, as in a
	// sync. What is read stays under arg.
	root, rel := repositoryOf(arg)
	path := filepath.Join(rel, f.path)
	dir := filepath.Join(root, path)
	if render.KustomizationFile(dir) != "" && !all {
		return []target{{root: root, path: path}}, nil
	}
	roots, err := kustomizationRoots(dir)
	if err != nil {
		return nil, err
	}
	if len(roots) == 0 {
		return []target{{root: root, path: path}}, nil
	}
	out := make([]target, 0, len(roots))
	for _, r := range roots {
		out = append(out, target{root: root, path: filepath.Join(path, r), label: filepath.ToSlash(filepath.Join(f.path, r))})
	}
	return out, nil
}

// repositoryOf is the repository folder arg is in, and arg's place in it:
// the Git work tree holding arg, else the current folder when arg is
// inside it, else arg itself.
func repositoryOf(arg string) (root, rel string) {
	abs, err := filepath.Abs(arg)
	if err != nil {
		return arg, "."
	}
	inside := func(base string) (string, bool) {
		r, err := filepath.Rel(base, abs)
		return r, err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator))
	}
	if repo, err := gitsource.OpenLocal(arg); err == nil {
		if r, ok := inside(repo.Root); ok {
			return repo.Root, r
		}
	}
	if cwd, err := os.Getwd(); err == nil {
		if r, ok := inside(cwd); ok {
			return cwd, r
		}
	}
	return arg, "."
}

// kustomizationRoots lists the folders under dir (relative, sorted; dir
// itself as ".") with a kustomization file that builds on its own: kind
// Component is part of another build, not a root.
func kustomizationRoots(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		k := render.KustomizationFile(p)
		if k == "" {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, k))
		if err != nil {
			return err
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if sigsyaml.Unmarshal(b, &head) == nil && head.Kind == "Component" {
			return nil
		}
		r, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	sort.Strings(out)
	return out, err
}
