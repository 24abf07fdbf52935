// Package crdschema applies the project's CRD schemas offline, with the API
// server's own structural-schema code: defaulting today, and validation
// against the same OpenAPI and CEL rules.
package crdschema

import (
	"context"
	"fmt"
	"io/fs"
	"path"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/config"
)

// Schemas are the structural schemas of the project's CRDs by kind, with
// the API server's own validation strategy for each.
type Schemas struct {
	byGVK      map[schema.GroupVersionKind]*structuralschema.Structural
	strategies map[schema.GroupVersionKind]strategy
	crds       []*apiextensionsv1.CustomResourceDefinition
}

// strategy is what the API server validates a custom resource with.
type strategy interface {
	Validate(ctx context.Context, obj runtime.Object) field.ErrorList
	ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList
}

// Load reads the CRDs embedded in the binary.
func Load() (*Schemas, error) {
	files, err := fs.Glob(config.CRDs, "crd/bases/*.yaml")
	if err != nil {
		return nil, err
	}
	s := &Schemas{byGVK: map[schema.GroupVersionKind]*structuralschema.Structural{}, strategies: map[schema.GroupVersionKind]strategy{}}
	for _, f := range files {
		raw, err := fs.ReadFile(config.CRDs, f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", path.Base(f), err)
		}
		s.crds = append(s.crds, crd)
		for _, v := range crd.Spec.Versions {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			internal := &apiextensions.JSONSchemaProps{}
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
				return nil, fmt.Errorf("%s: %w", path.Base(f), err)
			}
			st, err := structuralschema.NewStructural(internal)
			if err != nil {
				return nil, fmt.Errorf("%s: structural schema: %w", path.Base(f), err)
			}
			gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
			s.byGVK[gvk] = st
			strat, err := newStrategy(crd, gvk, internal, st)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path.Base(f), err)
			}
			s.strategies[gvk] = strat
		}
	}
	return s, nil
}

// CRDs are the project's CustomResourceDefinitions.
func (s *Schemas) CRDs() []*apiextensionsv1.CustomResourceDefinition { return s.crds }

// Knows reports whether gvk is one of the project's kinds.
func (s *Schemas) Knows(gvk schema.GroupVersionKind) bool { _, ok := s.byGVK[gvk]; return ok }

// Default fills in the CRD defaults, as the API server does when it reads
// the object.
func (s *Schemas) Default(u *unstructured.Unstructured) error {
	st, ok := s.byGVK[u.GroupVersionKind()]
	if !ok {
		return fmt.Errorf("%s is not a trainops kind", u.GroupVersionKind())
	}
	structuraldefaulting.Default(u.Object, st)
	return nil
}
