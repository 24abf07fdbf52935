// SPDX-License-Identifier: Apache-2.0

package crdschema

import (
	"context"
	"fmt"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apiextensionsfeatures "k8s.io/apiextensions-apiserver/pkg/features"
	"k8s.io/apimachinery/pkg/api/operation"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// crStrategy validates a custom resource as kube-apiserver does on create
// and update: the steps of the customresource strategy and validator of
// k8s.io/apiextensions-apiserver v0.37.2 (pkg/registry/customresource,
// strategy.go and validator.go), composed here from the same validators.
// That package also holds the resource's storage, which links the API
// server's generic registry, etcd client and gRPC into the binary: many
// packages, loaded and initialised by every trainops command
// (docs/design.md). Our CRDs have no scale subresource, so
// its checks are left out.
type crStrategy struct {
	kind       schema.GroupVersionKind
	namespaced bool
	schema     apiservervalidation.SchemaValidator
	structural *structuralschema.Structural
	cel        *cel.Validator
}

func newCRStrategy(kind schema.GroupVersionKind, namespaced bool, validator apiservervalidation.SchemaValidator, st *structuralschema.Structural) crStrategy {
	// The CEL programs are compiled once, here.
	return crStrategy{kind: kind, namespaced: namespaced, schema: validator, structural: st,
		cel: cel.NewValidator(st, true, celconfig.PerCallLimit)}
}

// Validate is the validation of a create.
func (s crStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return field.ErrorList{field.Invalid(field.NewPath(""), obj, fmt.Sprintf("has type %T. Must be a pointer to an Unstructured type", obj))}
	}
	errs := s.typeMeta(u)
	if len(errs) == 0 {
		errs = append(errs, s.objectMeta(ctx, operation.Create, u, nil)...)
		errs = append(errs, apiservervalidation.ValidateCustomResource(nil, u.UnstructuredContent(), s.schema)...)
	}
	// Embedded resources, and the list-type invariants.
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, u.Object, s.structural, false)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, s.structural, u.Object)...)
	return s.rules(ctx, errs, u, nil)
}

// ValidateUpdate is the validation of an update from old: with ratcheting,
// as the API server does, an unchanged invalid value is not refused.
func (s crStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return field.ErrorList{field.Invalid(field.NewPath(""), obj, fmt.Sprintf("has type %T. Must be a pointer to an Unstructured type", obj))}
	}
	o, ok := old.(*unstructured.Unstructured)
	if !ok {
		return field.ErrorList{field.Invalid(field.NewPath(""), old, fmt.Sprintf("has type %T. Must be a pointer to an Unstructured type", old))}
	}
	var options []apiservervalidation.ValidationOption
	var celOptions []cel.Option
	if utilfeature.DefaultFeatureGate.Enabled(apiextensionsfeatures.CRDValidationRatcheting) {
		correlated := common.NewCorrelatedObject(u.Object, o.Object, &model.Structural{Structural: s.structural})
		options = append(options, apiservervalidation.WithRatcheting(correlated))
		celOptions = append(celOptions, cel.WithRatcheting(correlated))
	}
	errs := s.typeMeta(u)
	if len(errs) == 0 {
		errs = append(errs, s.objectMeta(ctx, operation.Update, u, o)...)
		errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(nil, u.UnstructuredContent(), o.UnstructuredContent(), s.schema, options...)...)
	}
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, u.Object, s.structural, false)...)
	if oldErrs := structurallisttype.ValidateListSetsAndMaps(nil, s.structural, o.Object); len(oldErrs) == 0 {
		errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, s.structural, u.Object)...)
	}
	return s.rules(ctx, errs, u, o, celOptions...)
}

// rules adds the CEL rules' errors to errs, unless errs already say the
// object is too broken for them to run.
func (s crStrategy) rules(ctx context.Context, errs field.ErrorList, u, old *unstructured.Unstructured, opts ...cel.Option) field.ErrorList {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
		}
	}
	var oldObj any
	if old != nil {
		oldObj = old.Object
	}
	ruleErrs, _ := s.cel.Validate(ctx, nil, s.structural, u.Object, oldObj, celconfig.RuntimeCELCostBudget, opts...)
	return append(errs, ruleErrs...)
}

// typeMeta checks the object's kind and apiVersion.
func (s crStrategy) typeMeta(u *unstructured.Unstructured) field.ErrorList {
	var errs field.ErrorList
	if u.GetKind() != s.kind.Kind {
		errs = append(errs, field.Invalid(field.NewPath("kind"), u.GetKind(), fmt.Sprintf("must be %v", s.kind.Kind)))
	}
	if want := s.kind.Group + "/" + s.kind.Version; u.GetAPIVersion() != want {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), u.GetAPIVersion(), fmt.Sprintf("must be %v", want)))
	}
	return errs
}

// objectMeta checks metadata as the API server does (names, labels,
// annotations, finalizers, owner references).
func (s crStrategy) objectMeta(ctx context.Context, op operation.Type, u, old *unstructured.Unstructured) field.ErrorList {
	meta, errs := objectMetaOf(u)
	if len(errs) > 0 {
		return errs
	}
	declarative := utilfeature.DefaultFeatureGate.Enabled(features.DeclarativeValidationBeta)
	if old == nil {
		return metavalidation.ValidateObjectMetaDeclaratively(ctx, op, meta, nil, s.namespaced, metavalidation.NameIsDNSSubdomain, field.NewPath("metadata"), declarative)
	}
	oldMeta, errs := objectMetaOf(old)
	if len(errs) > 0 {
		return errs
	}
	return metavalidation.ValidateObjectMetaDeclaratively(ctx, op, meta, oldMeta, s.namespaced, nil, field.NewPath("metadata"), declarative)
}

// objectMetaOf is u's metadata, typed.
func objectMetaOf(u *unstructured.Unstructured) (*metav1.ObjectMeta, field.ErrorList) {
	raw := u.UnstructuredContent()["metadata"]
	if raw == nil {
		return &metav1.ObjectMeta{}, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, field.ErrorList{field.Invalid(field.NewPath("metadata"), raw, fmt.Sprintf("expected map[string]interface{}, got %T", raw))}
	}
	meta := &metav1.ObjectMeta{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, meta); err != nil {
		return nil, field.ErrorList{field.Invalid(field.NewPath("metadata"), raw, err.Error())}
	}
	return meta, nil
}
