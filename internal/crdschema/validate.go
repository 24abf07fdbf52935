// SPDX-License-Identifier: Apache-2.0

package crdschema

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// newStrategy builds the API server's validation for one version of a
// CRD: its OpenAPI schema validator, list-type checks and CEL rules.
func newStrategy(crd *apiextensionsv1.CustomResourceDefinition, gvk schema.GroupVersionKind, internal *apiextensions.JSONSchemaProps, st *structuralschema.Structural) (strategy, error) {
	validator, _, err := apiservervalidation.NewSchemaValidator(internal)
	if err != nil {
		return nil, err
	}
	return newCRStrategy(gvk, crd.Spec.Scope == apiextensionsv1.NamespaceScoped, validator, st), nil
}

// Validate checks obj as the API server would on create (old nil) or on
// update from old: unknown fields, defaults, the OpenAPI schema and the CEL
// rules, transition rules included. It defaults obj in place, and prunes
// the unknown fields of an obj it refuses for them. The error has
// the API server's wording, so offline and online messages agree.
func (s *Schemas) Validate(ctx context.Context, obj, old *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	st, ok := s.byGVK[gvk]
	if !ok {
		return fmt.Errorf("%s is not a trainops kind", gvk)
	}
	// Unknown fields are refused, as strict field validation does. Pruning
	// removes only the fields it reports, so obj is unchanged unless it is
	// refused.
	unknown := pruning.PruneWithOptions(obj.Object, st, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	if len(unknown) > 0 {
		sort.Strings(unknown)
		var parts []string
		for _, u := range unknown {
			parts = append(parts, fmt.Sprintf("unknown field %q", u))
		}
		return apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: strict decoding error: %s", gvk.Kind, gvk.Version, gvk.Kind, strings.Join(parts, ", ")))
	}
	if err := s.Default(obj); err != nil {
		return err
	}
	// The status of a resource with a status subresource is not written on
	// create or update of the resource itself.
	unstructured.RemoveNestedField(obj.Object, "status")
	strat, err := s.strategy(gvk)
	if err != nil {
		return err
	}
	var errs field.ErrorList
	if old == nil {
		errs = strat.Validate(ctx, obj)
	} else {
		o := old.DeepCopy()
		if err := s.Default(o); err != nil {
			return err
		}
		unstructured.RemoveNestedField(o.Object, "status")
		// Offline objects have no resourceVersion; the server's update
		// check wants one.
		n := obj.DeepCopy()
		for _, u := range []*unstructured.Unstructured{n, o} {
			if u.GetResourceVersion() == "" {
				u.SetResourceVersion("1")
			}
		}
		errs = strat.ValidateUpdate(ctx, n, o)
	}
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(gvk.GroupKind(), obj.GetName(), errs)
}

// UnknownFields lists the fields of obj (a trainops kind) that its schema
// does not have, as paths ("spec.foo"), sorted; obj is not changed.
func (s *Schemas) UnknownFields(obj *unstructured.Unstructured) ([]string, error) {
	gvk := obj.GroupVersionKind()
	st, ok := s.byGVK[gvk]
	if !ok {
		return nil, fmt.Errorf("%s is not a trainops kind", gvk)
	}
	unknown := pruning.PruneWithOptions(obj.DeepCopy().Object, st, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	sort.Strings(unknown)
	return unknown, nil
}
