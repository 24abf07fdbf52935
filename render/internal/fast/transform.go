// SPDX-License-Identifier: Apache-2.0

package fast

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/kustomize/api/filters/namespace"
	"sigs.k8s.io/kustomize/api/filters/patchjson6902"
	"sigs.k8s.io/kustomize/api/ifc"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/pkg/loader"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/kio/kioutil"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"
)

// patchTargets is what krusty's patch transformer asks of the resources
// it patches: resmap.ResMap's methods it calls, and no other. listMap is
// the fast path's.
type patchTargets interface {
	Select(kustypes.Selector) ([]*resource.Resource, error)
	GetById(resid.ResId) (*resource.Resource, error)
	ApplySmPatch(*resource.IdSet, *resource.Resource) error
}

// The methods are resmap.ResMap's own, with the same signatures.
var _ patchTargets = resmap.ResMap(nil)

// patchTransformer is kustomize's PatchTransformerPlugin (kustomize at
// KustomizeVersion, api/internal/builtins/PatchTransformer.go): one
// `patches` entry, parsed as krusty parses it, applied to patchTargets.
// Where krusty would refuse the entry, the fast path gives way and krusty
// says why.
type patchTransformer struct {
	sm     []*resource.Resource
	json   string
	target *kustypes.Selector
	source string
}

// newPatchTransformer parses pc, reading its file with ldr.
func newPatchTransformer(ldr ifc.Loader, rf *resource.Factory, pc kustypes.Patch) (*patchTransformer, error) {
	text, source := strings.TrimSpace(pc.Patch), fmt.Sprintf("[patch: %q]", strings.TrimSpace(pc.Patch))
	switch {
	case (text == "") == (pc.Path == ""):
		return nil, fmt.Errorf("%w: a patch needs one of patch and path", ErrNotFast)
	case pc.Path != "":
		loaded, err := ldr.Load(pc.Path)
		if err != nil {
			return nil, err
		}
		text, source = string(loaded), fmt.Sprintf("[path: %q]", pc.Path)
	}
	p := &patchTransformer{target: pc.Target, source: source}
	sm, smErr := rf.SliceFromBytes([]byte(text))
	if isJSONPatch(text) {
		// A list of operations; krusty refuses one that is both.
		if smErr == nil && len(sm) > 0 {
			return nil, fmt.Errorf("%w: %s is both a strategic merge and a JSON patch", ErrNotFast, source)
		}
		p.json = text
		return p, nil
	}
	if smErr != nil {
		return nil, smErr
	}
	for _, r := range sm {
		if pc.Options != nil && pc.Options.AllowNameChange {
			r.AllowNameChange()
		}
		if pc.Options != nil && pc.Options.AllowKindChange {
			r.AllowKindChange()
		}
	}
	p.sm = sm
	return p, nil
}

// isJSONPatch reports whether text is a JSON patch (a list of
// operations) rather than a strategic merge patch.
func isJSONPatch(text string) bool {
	var v any
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		return true // krusty says what is wrong with it
	}
	_, list := v.([]any)
	return list
}

// transform is PatchTransformerPlugin.Transform.
func (p *patchTransformer) transform(m patchTargets) error {
	if p.json != "" {
		if p.target == nil {
			return fmt.Errorf("must specify a target for JSON patch %s", p.source)
		}
		selected, err := m.Select(*p.target)
		if err != nil {
			return err
		}
		for _, r := range selected {
			r.StorePreviousId()
			internal := kioutil.GetInternalAnnotations(&r.RNode)
			if err := r.ApplyFilter(patchjson6902.Filter{Patch: p.json}); err != nil {
				return err
			}
			annotations := r.GetAnnotations()
			for k, v := range internal {
				annotations[k] = v
			}
			if err := r.SetAnnotations(annotations); err != nil {
				return err
			}
		}
		return nil
	}
	if p.target != nil {
		if len(p.sm) > 1 {
			return fmt.Errorf("%w: several strategic merge patches with one target", ErrNotFast)
		}
		selected, err := m.Select(*p.target)
		if err != nil {
			return err
		}
		return m.ApplySmPatch(resource.MakeIdSet(selected), p.sm[0])
	}
	for _, patch := range p.sm {
		target, err := m.GetById(patch.OrgId())
		if err != nil {
			return err
		}
		if err := applySmPatch(target, patch); err != nil {
			return err
		}
	}
	return nil
}

// transform runs k's transformers on list in krusty's order: patches,
// namespace, labels, annotations.
func (b *fastBuilder) transform(dir string, k *kustypes.Kustomization, list []*resource.Resource) ([]*resource.Resource, error) {
	m := &listMap{list: list}
	if slices.ContainsFunc(k.Patches, func(p kustypes.Patch) bool { return b.jsonPatch(dir, p) }) {
		for _, r := range m.list {
			if !annotationsAreStrings(r) {
				return nil, fmt.Errorf("%w: a JSON patch over %s, whose annotations are not all strings", ErrNotFast, r.CurId())
			}
		}
	}
	if len(k.Patches) > 0 {
		// Confined to dir, as kustomize's loader restricts a patch file;
		// the pre-scan has refused any path out of the repository.
		ldr, err := loader.NewFileLoaderAtRoot(filesys.MakeFsOnDisk()).New(strings.TrimPrefix(dir, string(filepath.Separator)))
		if err != nil {
			return nil, err
		}
		for _, pc := range k.Patches {
			p, err := newPatchTransformer(ldr, b.rf, pc)
			if err != nil {
				return nil, err
			}
			if err := p.transform(m); err != nil {
				return nil, err
			}
			// As krusty after each transformer: a patch may have deleted
			// a resource.
			m.dropEmpties()
		}
	}
	if k.Namespace != "" {
		// As krusty's namespace transformer, one resource at a time (on
		// every core); unique below is its ID check.
		err := errors.Join(Parallel(len(m.list), func(i int) error {
			r := m.list[i]
			if r.IsNilOrEmpty() || r.GetAnnotations(konfig.HelmGeneratedAnnotation)[konfig.HelmGeneratedAnnotation] == "true" {
				return nil
			}
			storePreviousID(r)
			return r.ApplyFilter(namespace.Filter{Namespace: k.Namespace, FsSlice: defaultSpecs().NameSpace, SetRoleBindingSubjects: namespace.DefaultSubjectsOnly})
		})...)
		if err != nil {
			return nil, err
		}
	}
	for _, l := range k.Labels {
		fss, err := labelFieldSpecs(l)
		if err != nil {
			return nil, err
		}
		if err := m.setEntries(l.Pairs, fss); err != nil {
			return nil, err
		}
	}
	if err := m.setEntries(k.CommonLabels, defaultSpecs().CommonLabels); err != nil {
		return nil, err
	}
	if err := m.setEntries(k.CommonAnnotations, defaultSpecs().CommonAnnotations); err != nil {
		return nil, err
	}
	if err := unique(m.list); err != nil {
		return nil, err
	}
	return m.list, nil
}

// jsonPatch reports whether p, of the kustomization in dir, is a JSON
// patch.
func (b *fastBuilder) jsonPatch(dir string, p kustypes.Patch) bool {
	if p.Path != "" {
		return isJSONPatch(string(b.in.Patches[filepath.Join(dir, p.Path)]))
	}
	return isJSONPatch(p.Patch)
}

// GetById implements patchTargets: the one resource whose current or a
// previous ID is id.
func (m *listMap) GetById(id resid.ResId) (*resource.Resource, error) {
	var found []*resource.Resource
	for _, r := range m.list {
		for _, rid := range append(r.PrevIds(), r.CurId()) {
			if id.Equals(rid) {
				found = append(found, r)
				break
			}
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%d matches for Id %s; failed to find unique target for patch %s", len(found), id, id)
	}
	return found[0], nil
}

// Select implements patchTargets, as krusty selects a patch's targets.
func (m *listMap) Select(s kustypes.Selector) ([]*resource.Resource, error) {
	sr, err := kustypes.NewSelectorRegex(&s)
	if err != nil {
		return nil, err
	}
	var out []*resource.Resource
	for _, r := range m.list {
		cur, org := r.CurId(), r.OrgId()
		if !sr.MatchNamespace(org.EffectiveNamespace()) && !sr.MatchNamespace(cur.EffectiveNamespace()) {
			continue
		}
		if !sr.MatchName(org.Name) && !sr.MatchName(cur.Name) {
			continue
		}
		if !sr.MatchGvk(r.GetGvk()) {
			continue
		}
		if ok, err := r.MatchesLabelSelector(s.LabelSelector); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		if ok, err := r.MatchesAnnotationSelector(s.AnnotationSelector); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// ApplySmPatch implements patchTargets, as krusty applies a strategic
// merge patch to selected resources.
func (m *listMap) ApplySmPatch(selected *resource.IdSet, patch *resource.Resource) error {
	var list []*resource.Resource
	for _, r := range m.list {
		if selected.Contains(r.CurId()) {
			c := patch.DeepCopy()
			c.CopyMergeMetaDataFieldsFrom(patch)
			c.SetGvk(r.GetGvk())
			c.SetKind(patch.GetKind())
			if err := applySmPatch(r, c); err != nil {
				return err
			}
		}
		if !r.IsNilOrEmpty() {
			list = append(list, r)
		}
	}
	m.list = list
	return nil
}
