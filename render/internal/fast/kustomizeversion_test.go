// SPDX-License-Identifier: Apache-2.0

package fast

import (
	"os"
	"regexp"
	"testing"
)

// TestCopiesFollowGoModsKustomize: the kustomize code the fast path copies
// is that of the release go.mod requires: a new kustomize needs the copies
// read again against it (then kustomizeVersion changes).
func TestCopiesFollowGoModsKustomize(t *testing.T) {
	mod, err := os.ReadFile("../../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*sigs\.k8s\.io/kustomize/api (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod requires no sigs.k8s.io/kustomize/api")
	}
	if got := string(m[1]); got != kustomizeVersion {
		t.Errorf("go.mod requires sigs.k8s.io/kustomize/api %s; the fast path's copies of its code follow %s: read them again against %s", got, kustomizeVersion, got)
	}
}
