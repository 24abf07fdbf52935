// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trainops/trainops/internal/check"
)

// TestNarrowKinds: a GitSync may narrow the kinds trainops's settings
// allow, never widen them.
func TestNarrowKinds(t *testing.T) {
	got, err := narrowKinds(check.DefaultAllowedKinds, nil)
	if err != nil || len(got) != len(check.DefaultAllowedKinds) {
		t.Fatalf("no spec.allowedKinds: %v, %v; want the settings' kinds", got, err)
	}
	got, err = narrowKinds(check.DefaultAllowedKinds, []string{"PyJob.training.trainops.dev"})
	if err != nil || len(got) != 1 || got[0].Kind != "PyJob" {
		t.Fatalf("narrowed to PyJob: %v, %v", got, err)
	}
	if _, err := narrowKinds(check.DefaultAllowedKinds, []string{"ClusterRoleBinding.rbac.authorization.k8s.io"}); err == nil || !strings.Contains(err.Error(), "ClusterRoleBinding") {
		t.Fatalf("widened to ClusterRoleBinding: err %v", err)
	}
}

// TestGitSyncLabel: the sync label of a GitSync is a valid label value,
// unique to its namespace and name (a namespace has no dot), however long
// they are.
func TestGitSyncLabel(t *testing.T) {
	long := strings.Repeat("n", 63)
	seen := map[string]string{}
	for _, c := range [][2]string{{"team-a", "training"}, {"team-a", "other"}, {"team-b", "training"}, {long, "training"}, {long, "other"}, {"team", "a.b"}, {"team-a", "b"}} {
		v := GitSyncLabel(c[0], c[1])
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("%s/%s: label value %q: %v", c[0], c[1], v, errs)
		}
		if prev, dup := seen[v]; dup {
			t.Errorf("%s/%s and %s share the label value %q", c[0], c[1], prev, v)
		}
		seen[v] = c[0] + "/" + c[1]
	}
}
