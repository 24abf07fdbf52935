package controller

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/trainops/trainops/internal/builder"
)

// metadataOnly are the kinds of children the informer cache keeps as
// metadata only: a PyJob's headless Service is one per PyJob, and its spec,
// never read, was more than half of what each cost. They are compared for
// drift by the fields trainops's apply still owns (unownedFields).
var metadataOnly = map[schema.GroupKind]bool{{Kind: "Service"}: true}

// cachedLike is an empty object of the shape the cache keeps kind gvk in.
func cachedLike(desired client.Object, gvk schema.GroupVersionKind) client.Object {
	if metadataOnly[gvk.GroupKind()] {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		return m
	}
	return emptyLike(desired)
}

// metadataList is an empty list of kind gvk, read as metadata only.
func metadataList(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(gvk)
	return l
}

// builtinTypes are the schemas of the built-in kinds, the ones the API
// server computes managed fields with.
var builtinTypes = sync.OnceValue(func() managedfields.TypeConverter {
	return applyconfigurations.NewTypeConverter(clientgoscheme.Scheme)
})

// notOwned are the fields the API server never records as anyone's.
var notOwned = fieldpath.NewSet(
	fieldpath.MakePathOrDie("apiVersion"),
	fieldpath.MakePathOrDie("kind"),
	fieldpath.MakePathOrDie("metadata"),
	fieldpath.MakePathOrDie("metadata", "name"),
	fieldpath.MakePathOrDie("metadata", "namespace"),
	fieldpath.MakePathOrDie("metadata", "creationTimestamp"),
)

// unownedFields names, sorted, the fields trainops applies in desired that
// its apply entry in live's managed fields no longer holds; none when it
// holds them all. The API server moves a field to whoever changes its
// value (kubectl edit, patch, a forced apply) and drops a removed field
// from every entry, so a field trainops set and no longer owns is one
// someone else changed; one someone else added, or set to the same value,
// is not. It needs live's metadata only.
func unownedFields(desired *unstructured.Unstructured, live metav1.Object) ([]string, error) {
	applied := desired.DeepCopy()
	delete(applied.Object, "status") // reset by the API server on apply
	tv, err := builtinTypes().ObjectToTyped(applied)
	if err != nil {
		return nil, fmt.Errorf("read the fields of %s %s: %w", desired.GetKind(), objectKey(desired), err)
	}
	want, err := tv.ToFieldSet()
	if err != nil {
		return nil, fmt.Errorf("read the fields of %s %s: %w", desired.GetKind(), objectKey(desired), err)
	}
	have := &fieldpath.Set{}
	for _, e := range live.GetManagedFields() {
		if builder.OwnApply(e) && e.FieldsV1 != nil {
			s := &fieldpath.Set{}
			if err := s.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
				return nil, fmt.Errorf("read the managed fields of %s: %w", objectKey(desired), err)
			}
			have = have.Union(s)
		}
	}
	missing := want.Difference(notOwned).Difference(have)
	var paths []string
	missing.Leaves().Iterate(func(p fieldpath.Path) {
		paths = append(paths, strings.TrimPrefix(p.String(), "."))
	})
	if len(paths) == 0 && !missing.Empty() {
		missing.Iterate(func(p fieldpath.Path) {
			paths = append(paths, strings.TrimPrefix(p.String(), "."))
		})
	}
	sort.Strings(paths)
	return paths, nil
}
