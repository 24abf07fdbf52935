// SPDX-License-Identifier: Apache-2.0

package children

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainops/trainops/internal/scheme"
)

// TestChildKindsAgree: each row of childKinds names its object's own kind
// (so the look-ups by kind and by Go type find the same row), and its
// parts agree: a kind with a row is compared by its own schema or not
// at all, one compared by its schema has an extractor, and every row has
// a cache transform.
func TestChildKindsAgree(t *testing.T) {
	s := scheme.New()
	seen := map[reflect.Type]bool{}
	for _, k := range childKinds {
		gvks, _, err := s.ObjectKinds(k.obj)
		if err != nil || len(gvks) != 1 || gvks[0].GroupKind() != k.gk {
			t.Errorf("row %v: its object is %v (%v)", k.gk, gvks, err)
		}
		if seen[reflect.TypeOf(k.obj)] {
			t.Errorf("row %v: a second row of %T", k.gk, k.obj)
		}
		seen[reflect.TypeOf(k.obj)] = true
		if k.drift == deducedCompare {
			t.Errorf("row %v: a kind with a Go type compared by a deduced schema", k.gk)
		}
		if (k.drift == typedCompare) != (k.extract != nil) {
			t.Errorf("row %v: compared %v, with an extractor %v", k.gk, k.drift, k.extract != nil)
		}
		if k.transform == nil {
			t.Errorf("row %v: no cache transform", k.gk)
		}
		if row := kindOf(k.gk); row.obj != k.obj {
			t.Errorf("row %v: the look-up by kind finds %T", k.gk, row.obj)
		}
		if got := driftChecked(k.obj); got != (k.drift != notCompared) {
			t.Errorf("row %v: driftChecked %v", k.gk, got)
		}
	}
	if driftChecked(&corev1.Namespace{}) {
		t.Error("a kind without a row is checked for drift")
	}
}

// TestComparedChildrenAreBounded: the children found unchanged are
// remembered up to the size, the least recently used forgotten first;
// a changed child (new resourceVersion or applied hash) is not found
// unchanged; nil remembers nothing.
func TestComparedChildrenAreBounded(t *testing.T) {
	child := func(i int, rv string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{UID: types.UID(fmt.Sprint(i)), ResourceVersion: rv}}
	}
	c := NewCompared(3)
	for i := range 3 {
		c.remember(child(i, "1"), "h")
	}
	if !c.unchanged(child(0, "1"), "h") { // 0 is now the most recently used
		t.Fatal("a remembered child is not found unchanged")
	}
	c.remember(child(3, "1"), "h")
	if c.unchanged(child(1, "1"), "h") {
		t.Error("past the size, the least recently used child is still remembered")
	}
	for _, i := range []int{0, 2, 3} {
		if !c.unchanged(child(i, "1"), "h") {
			t.Errorf("child %d forgotten", i)
		}
	}
	if c.unchanged(child(0, "2"), "h") || c.unchanged(child(0, "1"), "other") {
		t.Error("a changed child is found unchanged")
	}
	var none *Compared
	none.remember(child(0, "1"), "h")
	if none.unchanged(child(0, "1"), "h") {
		t.Error("nil remembers")
	}
}
