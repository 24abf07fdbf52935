// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"runtime/debug"
	"testing"

	"github.com/trainops/trainops/render"
)

// TestCopiesFollowGoModsKustomize: the kustomize code the fast path copies
// is that of the release go.mod requires: a new kustomize needs the copies
// read again against it (then kustomizeVersion changes).
func TestCopiesFollowGoModsKustomize(t *testing.T) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information in the test binary")
	}
	for _, d := range info.Deps {
		if d.Path == "sigs.k8s.io/kustomize/api" {
			if d.Version != render.KustomizeVersion {
				t.Errorf("go.mod requires sigs.k8s.io/kustomize/api %s; the fast path's copies of its code follow %s: read them again against %s", d.Version, render.KustomizeVersion, d.Version)
			}
			return
		}
	}
	t.Fatal("sigs.k8s.io/kustomize/api is not a dependency of the test binary")
}
