// SPDX-License-Identifier: Apache-2.0

// Package crdschema applies the project's CRD schemas offline, with the API
// server's own structural-schema code: defaulting today, and validation
// against the same OpenAPI and CEL rules.
package crdschema

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

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
// the API server's own validation strategy for each. Safe for concurrent
// use.
//
// The strategies' CEL programs take memory a long-running trainops needs
// only when a sync brings new objects of its kinds: Load builds them all,
// and they are released once unused for KeepStrategies, each kind's built
// again when next needed.
type Schemas struct {
	byGVK   map[schema.GroupVersionKind]*structuralschema.Structural
	sources map[schema.GroupVersionKind]source
	crds    []*apiextensionsv1.CustomResourceDefinition
	// keep is how long the strategies are kept unused.
	keep time.Duration

	mu         sync.Mutex
	strategies map[schema.GroupVersionKind]strategy // those built and kept
	used       time.Time
	release    *time.Timer
}

// KeepStrategies is how long Schemas keeps its strategies unused.
const KeepStrategies = 30 * time.Second

// source is what a kind's strategy is built from.
type source struct {
	crd      *apiextensionsv1.CustomResourceDefinition
	internal *apiextensions.JSONSchemaProps
}

// strategy is what the API server validates a custom resource with.
type strategy interface {
	Validate(ctx context.Context, obj runtime.Object) field.ErrorList
	ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList
}

// Load reads the CRDs embedded in the binary.
func Load() (*Schemas, error) { return load(KeepStrategies, nil) }

// LoadWith reads the CRDs embedded in the binary and extra, other
// projects' CRDs (Kueue's queues, the Prometheus Operator's monitors): a
// repository's objects of their kinds are then validated with the same
// code as trainops's own. An extra CRD of trainops's own groups is
// skipped: the binary's own schema decides those.
func LoadWith(extra []*apiextensionsv1.CustomResourceDefinition) (*Schemas, error) {
	return load(KeepStrategies, extra)
}

// load is LoadWith, keeping the strategies unused for keep.
func load(keep time.Duration, extra []*apiextensionsv1.CustomResourceDefinition) (*Schemas, error) {
	files, err := fs.Glob(config.CRDs, "crd/bases/*.yaml")
	if err != nil {
		return nil, err
	}
	s := &Schemas{byGVK: map[schema.GroupVersionKind]*structuralschema.Structural{}, sources: map[schema.GroupVersionKind]source{}, keep: keep}
	own := map[string]bool{}
	for _, f := range files {
		raw, err := fs.ReadFile(config.CRDs, f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", path.Base(f), err)
		}
		own[crd.Spec.Group] = true
		if err := s.add(crd, path.Base(f)); err != nil {
			return nil, err
		}
	}
	for _, crd := range extra {
		if own[crd.Spec.Group] {
			continue
		}
		if err := s.add(crd, "CRD "+crd.Name); err != nil {
			return nil, err
		}
	}
	// Built here, every kind at once, so a CRD whose rules do not compile
	// fails the start, not a sync. They are kept as if just used: a
	// command validates right after loading, and a long-running trainops
	// releases them once unused for keep.
	gvks := slices.Collect(maps.Keys(s.sources))
	built := make([]strategy, len(gvks))
	var g errgroup.Group
	for i, gvk := range gvks {
		g.Go(func() (err error) {
			built[i], err = s.build(gvk)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.strategies = make(map[schema.GroupVersionKind]strategy, len(gvks))
	for i, gvk := range gvks {
		s.strategies[gvk] = built[i]
	}
	s.used = time.Now()
	s.release = time.AfterFunc(s.keep, s.releaseIdle)
	return s, nil
}

// add adds the structural schema of every version of crd; what names it
// in errors.
func (s *Schemas) add(crd *apiextensionsv1.CustomResourceDefinition, what string) error {
	s.crds = append(s.crds, crd)
	for _, v := range crd.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		internal := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		st, err := structuralschema.NewStructural(internal)
		if err != nil {
			return fmt.Errorf("%s: structural schema: %w", what, err)
		}
		gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
		if _, dup := s.byGVK[gvk]; dup {
			return fmt.Errorf("%s: %s has two CRDs", what, gvk)
		}
		s.byGVK[gvk] = st
		s.sources[gvk] = source{crd: crd, internal: internal}
	}
	return nil
}

// build builds gvk's strategy.
func (s *Schemas) build(gvk schema.GroupVersionKind) (strategy, error) {
	src := s.sources[gvk]
	strat, err := newStrategy(src.crd, gvk, src.internal, s.byGVK[gvk])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.crd.Name, err)
	}
	return strat, nil
}

// strategy is gvk's strategy, built if it was released (each kind's
// alone: a sync of new PyJobs needs no other kind's CEL programs). Each
// use keeps the strategies for s.keep more.
func (s *Schemas) strategy(gvk schema.GroupVersionKind) (strategy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	strat, ok := s.strategies[gvk]
	if !ok {
		var err error
		if strat, err = s.build(gvk); err != nil {
			return nil, err
		}
		if s.strategies == nil {
			s.strategies = map[schema.GroupVersionKind]strategy{}
		}
		s.strategies[gvk] = strat
	}
	s.used = time.Now()
	if s.release == nil {
		s.release = time.AfterFunc(s.keep, s.releaseIdle)
	}
	return strat, nil
}

// releaseIdle releases the strategies when unused for s.keep, or looks again
// when they will have been.
func (s *Schemas) releaseIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if idle := time.Since(s.used); idle < s.keep {
		s.release.Reset(s.keep - idle)
		return
	}
	s.strategies, s.release = nil, nil
}

// Held is how many kinds' strategies are built and kept now.
func (s *Schemas) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.strategies)
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
