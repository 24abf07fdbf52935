// SPDX-License-Identifier: Apache-2.0

package children

import (
	"encoding/json"
	"maps"
	"testing"
	"unsafe"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

// The cache's transforms leave every string of an object's metadata as it
// was (but a Job's and a PyJob's Service's labels, dropped), the repeated ones pointing at one
// shared copy.
func TestCachedMetadataSharesRepeatedStrings(t *testing.T) {
	pj := &trainingv1alpha1.PyJob{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "resnet", UID: "11111111-2222-3333-4444-555555555555"}}
	transforms := map[string]func(any) (any, error){}
	for obj, by := range CacheOptions().ByObject {
		switch obj.(type) {
		case *batchv1.Job:
			transforms["Job"] = by.Transform
		case *corev1.Service:
			transforms["Service"] = by.Transform
		}
	}
	transforms["PyJob"] = CacheOptions().DefaultTransform
	fromGit := pj.DeepCopy()
	fromGit.Labels = map[string]string{gitopsv1alpha1.LabelSync: "trainops"}
	built := map[string]client.Object{"Job": testenv.PyJobChildren(t, pj).Job, "Service": builder.ServiceFor(pj), "PyJob": fromGit}
	kept := map[string]client.Object{"Job": &batchv1.Job{}, "Service": &metav1.PartialObjectMetadata{}, "PyJob": &trainingv1alpha1.PyJob{}}
	for kind, transform := range transforms {
		t.Run(kind, func(t *testing.T) {
			src := built[kind]
			src.SetAnnotations(map[string]string{builder.AnnotationAppliedHash: "0123456789abcdef"})
			src.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: builder.FieldManager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}})
			raw, err := json.Marshal(src)
			if err != nil {
				t.Fatal(err)
			}
			// Decoded into what the cache keeps, as the informer does:
			// every string a copy of its own.
			obj := kept[kind]
			if err := json.Unmarshal(raw, obj); err != nil {
				t.Fatal(err)
			}
			if _, err := transform(obj); err != nil {
				t.Fatal(err)
			}
			m := metav1.ObjectMeta{Labels: obj.GetLabels(), Annotations: obj.GetAnnotations(), OwnerReferences: obj.GetOwnerReferences(), ManagedFields: obj.GetManagedFields()}
			labels, annotations := src.GetLabels(), src.GetAnnotations()
			if kind != "PyJob" {
				labels = nil // not kept: nothing reads a Job's or a PyJob's Service's
			}
			if !maps.Equal(m.Labels, labels) || !maps.Equal(m.Annotations, annotations) {
				t.Fatalf("labels %v and annotations %v changed to %v and %v", labels, annotations, m.Labels, m.Annotations)
			}
			shared := func(what, got, want string) {
				t.Helper()
				if got != want || unsafe.StringData(got) != unsafe.StringData(canon[want]) {
					t.Errorf("%s %q is a copy of its own, want the shared %q", what, got, want)
				}
			}
			for k, v := range m.Labels {
				shared("label", k, k)
				if k == builder.LabelManagedBy {
					shared("label value", v, builder.ManagedBy)
				}
			}
			for k := range m.Annotations {
				shared("annotation", k, builder.AnnotationAppliedHash)
			}
			if len(m.Labels) == 0 && kind == "PyJob" {
				t.Error("no labels to share")
			}
			for _, r := range m.OwnerReferences {
				shared("owner's API version", r.APIVersion, trainingv1alpha1.GroupVersion.String())
			}
			for _, e := range m.ManagedFields {
				shared("manager", e.Manager, builder.FieldManager)
			}
		})
	}
}
