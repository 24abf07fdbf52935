// SPDX-License-Identifier: Apache-2.0

package fast

import (
	"fmt"
	"reflect"
	"testing"

	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/api/resource"
)

// prevIDs is r's previous IDs as text, or the panic reading them makes.
func prevIDs(r *resource.Resource) (s string) {
	defer func() {
		if p := recover(); p != nil {
			s = fmt.Sprint("panic: ", p)
		}
	}()
	return fmt.Sprint(r.PrevIds())
}

// TestStorePreviousIDIsKustomizes holds storePreviousID to
// resource.StorePreviousId: the same annotations, and the same object,
// after one namespace transformer and after two.
func TestStorePreviousIDIsKustomizes(t *testing.T) {
	docs := []string{
		"apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: a\n",
		"apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: a\n  namespace: team\n  annotations:\n    x: \"1\"\n",
		"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n  annotations: {}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  annotations:\n    config.kubernetes.io/previousNames: old\n    y: 2\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  annotations:\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  annotations:\n    internal.config.kubernetes.io/previousKinds: [a]\n",
	}
	rf := provider.NewDefaultDepProvider().GetResourceFactory()
	for _, doc := range docs {
		theirs, err := rf.SliceFromBytes([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		ours, err := rf.SliceFromBytes([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		for round := 1; round <= 2; round++ {
			theirs[0].StorePreviousId()
			storePreviousID(ours[0])
			a, aerr := theirs[0].Map()
			b, berr := ours[0].Map()
			if aerr != nil || berr != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("%q, round %d:\nkustomize %v %v\nours      %v %v", doc, round, a, aerr, b, berr)
			}
			if a, b := prevIDs(theirs[0]), prevIDs(ours[0]); a != b {
				t.Fatalf("%q, round %d: previous IDs %s, kustomize's %s", doc, round, b, a)
			}
		}
	}
}
