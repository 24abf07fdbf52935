package render

import (
	"context"
	"crypto/sha256"
	"maps"
	"slices"
)

// Reuse is asked, for each file whose objects a render would parse,
// whether the caller already holds what that file renders to. key changes
// whenever that may: it covers the file's path and bytes, and in a
// kustomization every kustomization and patch file of the tree (the fast
// path builds each resource from its own file and those alone). Answering
// true, with the kinds of the file's objects, the render does not parse
// the file and gives one Object with Reused set in its place. It is asked
// from several goroutines at once.
type Reuse func(file, key string) (kinds []string, ok bool)

// RenderReusing is RenderContext, asking reuse about each file it would
// parse (see Reuse). Objects of a kustomization the fast path does not
// build come from krusty whole: reuse is not asked, and they have no Key.
// A file reached twice in one tree gives a Reused object each time.
func RenderReusing(ctx context.Context, root, path string, l Limits, reuse Reuse) ([]Object, error) {
	return renderWith(ctx, root, path, l, nil, reuse)
}

// plainTree is the tree digest of a plain folder: each file is its own
// objects.
const plainTree = "plain"

// fileKey is the key of file in a tree of digest tree (see Reuse).
func fileKey(tree, file string, data []byte) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(tree), []byte(file), data} {
		_, _ = h.Write(part)
		_, _ = h.Write([]byte{0})
	}
	return string(h.Sum(nil))
}

// digest is the tree digest of what s read besides the resource files:
// the kustomizations, as built, and the patch files.
func (s *scan) digest() string {
	h := sha256.New()
	for _, m := range []map[string][]byte{s.overlay, s.inputs} {
		for _, p := range slices.Sorted(maps.Keys(m)) {
			_, _ = h.Write([]byte(p))
			_, _ = h.Write([]byte{0})
			_, _ = h.Write(m[p])
			_, _ = h.Write([]byte{0})
		}
		_, _ = h.Write([]byte{1})
	}
	return string(h.Sum(nil))
}

// reused is the Object a render gives in place of file's objects.
func reused(file, key string) Object { return Object{File: file, Key: key, Reused: true} }
