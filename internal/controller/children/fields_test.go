// SPDX-License-Identifier: Apache-2.0

package children

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

// applyChild applies desired, without an owner to collect it, and returns
// what trainops applied: desired with its applied hash.
func applyChild(t *testing.T, desired client.Object) *unstructured.Unstructured {
	t.Helper()
	desired.SetOwnerReferences(nil)
	if _, _, err := (Deps{Client: k8s}).Applier().Apply(context.Background(), desired, MetadataAnswer); err != nil {
		t.Fatal(err)
	}
	want, err := builder.ToUnstructured(desired)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := configHash(want)
	if err != nil {
		t.Fatal(err)
	}
	return withAnnotation(want, builder.AnnotationAppliedHash, hash)
}

// unownedFields, on the metadata of a Service trainops applied, finds
// nothing until someone else changes a field trainops set: then it names
// that field, however deep (an atomic map as a whole), and only it; a
// label added beside trainops's, or a field set by someone else to the
// value trainops gave it, is not a change.
func TestUnownedFieldsNameWhatSomeoneElseChanged(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	pj := &trainingv1alpha1.PyJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fields", UID: "11111111-2222-3333-4444-555555555555"}}
	pj.Spec.Workers = 2
	desired := builder.ServiceFor(pj)
	want := applyChild(t, desired)
	check := func(step string, wantPaths ...string) {
		t.Helper()
		live := cachedLike(desired, want.GroupVersionKind())
		if _, ok := live.(*metav1.PartialObjectMetadata); !ok {
			t.Fatalf("a Service is read as %T, want metadata only", live)
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(desired), live); err != nil {
			t.Fatal(err)
		}
		got, err := drift(want, live)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, wantPaths) {
			t.Errorf("%s: fields changed %q, want %q", step, got, wantPaths)
		}
		// As the cache keeps it: the hash of the fields says whether
		// they changed.
		if _, err := keepOwnFieldsHash(live); err != nil {
			t.Fatal(err)
		}
		got, err = drift(want, live)
		switch {
		case len(wantPaths) == 0 && (err != nil || len(got) > 0):
			t.Errorf("%s: as cached, fields changed %q, error %v; want none", step, got, err)
		case len(wantPaths) > 0 && !errors.Is(err, errFieldsHashed):
			t.Errorf("%s: as cached, fields changed %q, error %v; want %v", step, got, err, errFieldsHashed)
		}
	}
	check("as applied")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: desired.Name}}
	testenv.PatchAs(t, k8s, svc, "kubectl-label", types.MergePatchType, `{"metadata":{"labels":{"team.example.com/owner":"ml"}}}`)
	check("a label added")
	testenv.PatchAs(t, k8s, svc, "kubectl-edit", types.MergePatchType, `{"spec":{"publishNotReadyAddresses":true}}`)
	check("a field set to its value")
	testenv.PatchAs(t, k8s, svc, "kubectl-edit", types.StrategicMergePatchType, `{"spec":{"ports":[{"port":29500,"protocol":"TCP","targetPort":8080}]}}`)
	check("a port's target changed", `spec.ports[port=29500,protocol="TCP"].targetPort`)
	testenv.PatchAs(t, k8s, svc, "kubectl-edit", types.MergePatchType, `{"spec":{"selector":{"`+builder.LabelPyJob+`":"other"}},"metadata":{"annotations":{"`+builder.AnnotationAppliedHash+`":null}}}`)
	check("the selector changed and the annotation removed",
		"metadata.annotations."+builder.AnnotationAppliedHash,
		`spec.ports[port=29500,protocol="TCP"].targetPort`,
		"spec.selector") // an atomic map: owned whole
}

// Every Service trainops builds is, as applied, what the hash its cache
// keeps says: none costs a read of its fields after a restart.
func TestAppliedServicesMatchTheirCachedHash(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	cp := &gpuv1alpha1.ClusterPolicy{}
	testenv.LoadCase(t, testenv.Seed("gpu-cluster-config"), cp)
	cp.Name, cp.Spec.Namespace = "fields-"+ns, ns
	var services []client.Object
	for _, o := range builder.ForClusterPolicy(cp, builder.OfflineGPUNodes).Objects {
		if _, ok := o.(*corev1.Service); ok {
			services = append(services, o)
		}
	}
	pj := &trainingv1alpha1.PyJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hash", UID: "11111111-2222-3333-4444-555555555555"}}
	pj.Spec.Workers = 4
	services = append(services, builder.ServiceFor(pj))
	if len(services) < 2 {
		t.Fatalf("%d Services built, want the DCGM exporter's and the PyJob's", len(services))
	}
	for _, desired := range services {
		want := applyChild(t, desired)
		live := cachedLike(desired, want.GroupVersionKind())
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(desired), live); err != nil {
			t.Fatal(err)
		}
		if _, err := keepOwnFieldsHash(live); err != nil {
			t.Fatal(err)
		}
		if got, err := drift(want, live); err != nil || len(got) > 0 {
			t.Errorf("Service %s as applied: fields changed %q, error %v; want none", desired.GetName(), got, err)
		}
	}
}
