// SPDX-License-Identifier: Apache-2.0

package render

import (
	"path/filepath"

	"github.com/trainops/trainops/render/internal/fast"
)

// buildFast builds the kustomization in dir, which s has scanned, with
// the fast path (render/internal/fast), or says why it did not: krusty
// builds it then.
func buildFast(root, dir string, s *scan, l Limits, reuse Reuse) ([]Object, error) {
	kusts := make(map[string]*fast.Kustomization, len(s.parsed))
	for p, k := range s.parsed {
		kusts[filepath.Dir(p)] = k
	}
	built, err := fast.Build(fast.Input{Root: root, Dir: dir, Kustomizations: kusts, Resources: s.data, Patches: s.inputs,
		MaxBytes: l.MaxBytes, Reuse: fast.Reuse(reuse)})
	if err != nil {
		return nil, err
	}
	out := make([]Object, len(built))
	for i, b := range built {
		if b.Reused {
			out[i] = reused(b.File, b.Key)
			continue
		}
		out[i] = Object{Unstructured: b.Object, File: b.File, Key: b.Key}
	}
	return out, nil
}
