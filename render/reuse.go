// SPDX-License-Identifier: Apache-2.0

package render

import (
	"context"
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

// reused is the Object a render gives in place of file's objects.
func reused(file, key string) Object { return Object{File: file, Key: key, Reused: true} }
