// SPDX-License-Identifier: Apache-2.0

package fast

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"path/filepath"

	kustypes "sigs.k8s.io/kustomize/api/types"
)

// FileKey is the key of file in a tree of digest tree (see Reuse).
func FileKey(tree, file string, data []byte) string {
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
	for _, part := range [][]byte{[]byte(chain), []byte(b.rel(dir)), raw} {
		_, _ = h.Write(part)
		_, _ = h.Write([]byte{0})
	}
	for _, p := range k.Patches {
		if p.Path == "" {
			continue
		}
		data, ok := b.in.Patches[filepath.Join(dir, p.Path)]
		if !ok {
			return "", fmt.Errorf("%w: patch %s was not read by the pre-scan", ErrNotFast, p.Path)
		}
		_, _ = h.Write(data)
		_, _ = h.Write([]byte{0})
	}
	return string(h.Sum(nil)), nil
}
