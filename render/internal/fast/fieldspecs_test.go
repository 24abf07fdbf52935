// SPDX-License-Identifier: Apache-2.0

package fast

import (
	"reflect"
	"testing"

	kusttest "sigs.k8s.io/kustomize/api/testutils/kusttest"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestFieldSpecsAreKustomizes holds the fast path's copy of kustomize's
// default field specs to the library's own.
func TestFieldSpecsAreKustomizes(t *testing.T) {
	fs := filesys.MakeFsInMemory()
	kusttest.MakeHarnessWithFs(t, fs).WriteLegacyConfigs("/specs.yaml")
	theirs, err := fs.ReadFile("/specs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, want := defaultSpecs(), mustFieldSpecs(theirs)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("kustomize-fieldspecs.yaml differs from the kustomize library's default field specs: copy them again")
	}
	n := len(got.NameSpace) + len(got.CommonLabels) + len(got.TemplateLabels) + len(got.VolumeClaimTemplateLabels) + len(got.CommonAnnotations)
	for _, nr := range got.NameReference {
		n += len(nr.Referrers)
	}
	if n < 100 {
		t.Fatalf("%d field specs parsed: the file was not read", n)
	}
}
