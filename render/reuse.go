// SPDX-License-Identifier: Apache-2.0

package render

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"path/filepath"

	kustypes "sigs.k8s.io/kustomize/api/types"
)

// Reuse is asked, for each file whose objects a render would parse,
// whether the caller already holds what that file renders to. key changes
// whenever that may: it covers the file's path and bytes, and in a
// kustomization the kustomizations and patch files it is built through
// (see chainKey). Answering
// true, with the kinds of the file's objects, the render does not parse
// the file and gives one Object with Reused set in its place. It is asked
// from several goroutines at once.
type Reuse func(file, key string) (kinds []string, ok bool)

// RenderReusing is RenderContext, asking reuse about each file it would
// parse (see Reuse). Objects of a kustomization the fast path does not
// build come from krusty whole: reuse is not asked, and they have no Key.
// A file reached twice in one tree gives a Reused object each time.
func RenderReusing(ctx context.Context, root, path string, l Limits, reuse Reuse) ([]Object, error) {
	return renderWith(ctx, root, path, l, reuse)
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

// chainKey is what decides how the fast path builds each resource of the
// kustomization k in dir, reached through the kustomizations of chain (its
// parent's key, "" at the top): every kustomization on the way, but for
// its resources list, and their patch files. A resource is built from its
// own file through these alone (namespace, labels, annotations and patches
// act on one resource at a time), so listing another file or removing one
// leaves every other file's key as it was.
func (b *fastBuilder) chainKey(chain, dir string, k *kustypes.Kustomization) (string, error) {
	rest := *k
	rest.Resources = nil
	raw, err := json.Marshal(rest)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(chain), []byte(rel(b.root, dir)), raw} {
		_, _ = h.Write(part)
		_, _ = h.Write([]byte{0})
	}
	for _, p := range k.Patches {
		if p.Path == "" {
			continue
		}
		data, ok := b.inputs[filepath.Join(dir, p.Path)]
		if !ok {
			return "", fmt.Errorf("%w: patch %s was not read by the pre-scan", errNotFast, p.Path)
		}
		_, _ = h.Write(data)
		_, _ = h.Write([]byte{0})
	}
	return string(h.Sum(nil)), nil
}

// reused is the Object a render gives in place of file's objects.
func reused(file, key string) Object { return Object{File: file, Key: key, Reused: true} }
