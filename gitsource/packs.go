// SPDX-License-Identifier: Apache-2.0

package gitsource

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// maxPacks bounds the packs of a Source's bare clone. Each fetch of a new
// revision adds one, holding what that revision adds; past maxPacks the
// next fetch clones afresh into one pack, so the cache neither grows
// without end nor slows every object's look-up across hundreds of packs.
const maxPacks = 32

// errTooManyPacks sends Fetch to a fresh clone (see maxPacks).
var errTooManyPacks = fmt.Errorf("%w: it holds more than %d packs", errStaleCache, maxPacks)

// packCount is the number of pack files of the bare clone in dir.
func packCount(dir string) int {
	entries, err := os.ReadDir(filepath.Join(dir, "objects", "pack"))
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".pack") {
			n++
		}
	}
	return n
}
