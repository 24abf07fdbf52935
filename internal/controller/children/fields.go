// SPDX-License-Identifier: Apache-2.0

package children

import (
	"bytes"
	"errors"
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

// cachedLike is an empty object of the shape the cache keeps kind gvk in.
func cachedLike(desired client.Object, gvk schema.GroupVersionKind) client.Object {
	if kindOf(gvk.GroupKind()).drift == managedFields {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		return m
	}
	return emptyLike(desired)
}

// MetadataList is an empty list of kind gvk, read as metadata only.
func MetadataList(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadataList {
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

// fieldsHashType marks a managed-fields entry whose fieldsV1 the cache
// replaced with its hash (keepOwnFieldsHash).
const fieldsHashType = "trainops.dev/fields-hash"

// errFieldsHashed says the cached hash of trainops's fields differs from
// the hash of those it applies: the fields themselves are to be read from
// the API server to name what changed.
var errFieldsHashed = errors.New("the fields trainops owns changed: read them whole")

// keepOwnFieldsHash is the cache transform of the metadata-only children:
// keepOwnFields, with trainops's set of fields replaced by its hash
// (builder.FieldsHash). The set was a third of a Service's cached
// metadata; while it is what trainops applies, its hash says so.
func keepOwnFieldsHash(x any) (any, error) {
	x, _ = keepOwnFields(x)
	if m, ok := x.(metav1.Object); ok {
		mf := m.GetManagedFields()
		for i := range mf {
			if mf[i].FieldsV1 != nil {
				mf[i].FieldsV1 = &metav1.FieldsV1{Raw: []byte(builder.FieldsHash(mf[i].FieldsV1.Raw))}
				mf[i].FieldsType = fieldsHashType
			}
		}
	}
	return x, nil
}

// unownedFields names, sorted, the fields trainops applies in desired that
// its apply entry in live's managed fields no longer holds; none when it
// holds them all. The API server moves a field to whoever changes its
// value (kubectl edit, patch, a forced apply) and drops a removed field
// from every entry, so a field trainops set and no longer owns is one
// someone else changed; one someone else added, or set to the same value,
// is not. It needs live's metadata only. When live comes from the cache,
// which keeps a hash of the set, it is either nothing or errFieldsHashed.
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
	want = want.Difference(notOwned)
	have := &fieldpath.Set{}
	for _, e := range live.GetManagedFields() {
		if builder.OwnApply(e) && e.FieldsV1 != nil && e.FieldsType == fieldsHashType {
			raw, err := want.ToJSON()
			if err != nil {
				return nil, err
			}
			if string(e.FieldsV1.Raw) != builder.FieldsHash(raw) {
				return nil, errFieldsHashed
			}
			return nil, nil
		}
		if builder.OwnApply(e) && e.FieldsV1 != nil {
			s := &fieldpath.Set{}
			if err := s.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
				return nil, fmt.Errorf("read the managed fields of %s: %w", objectKey(desired), err)
			}
			have = have.Union(s)
		}
	}
	missing := want.Difference(have)
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
