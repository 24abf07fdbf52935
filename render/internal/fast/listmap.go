// SPDX-License-Identifier: Apache-2.0

package fast

import (
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"sigs.k8s.io/kustomize/api/filters/filtersutil"
	"sigs.k8s.io/kustomize/api/filters/fsslice"
	"sigs.k8s.io/kustomize/api/filters/patchstrategicmerge"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	kustypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/openapi"
	"sigs.k8s.io/kustomize/kyaml/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// listMap is the resmap.ResMap the fast path hands krusty's patch and
// sort transformers: a plain list, with the few methods they call written
// in linear time. Any other method is the nil embedded ResMap's, and
// panics: buildFast recovers, and krusty builds the tree instead.
type listMap struct {
	resmap.ResMap
	list []*resource.Resource
}

// Resources implements resmap.ResMap.
func (m *listMap) Resources() []*resource.Resource { return m.list }

// Size implements resmap.ResMap.
func (m *listMap) Size() int { return len(m.list) }

// Clear implements resmap.ResMap.
func (m *listMap) Clear() { m.list = nil }

// Append implements resmap.ResMap. IDs are checked once the transformers
// are done (unique), not on every append.
func (m *listMap) Append(r *resource.Resource) error {
	m.list = append(m.list, r)
	return nil
}

// dropEmpties drops the resources a patch deleted, as
// resmap.ResMap.DropEmpties.
func (m *listMap) dropEmpties() {
	m.list = slices.DeleteFunc(m.list, (*resource.Resource).IsNilOrEmpty)
}

// setEntries sets pairs on every resource (on every core), at the fields
// fss names, as krusty's label and annotation transformers do.
func (m *listMap) setEntries(pairs map[string]string, fss kustypes.FsSlice) error {
	if len(pairs) == 0 {
		return nil
	}
	f := entriesFilter{pairs: pairs, keys: yaml.SortedMapKeys(pairs), fss: fss}
	return errors.Join(Parallel(len(m.list), func(i int) error { return m.list[i].ApplyFilter(f) })...)
}

// kustomizeVersion is the sigs.k8s.io/kustomize/api release the copies
// of its code below follow (entriesFilter, the field specs, applySmPatch,
// storePreviousID): TestCopiesFollowGoModsKustomize fails when go.mod
// requires another, so they are read again against it.
const kustomizeVersion = "v0.21.2"

// entriesFilter is labels.Filter and annotations.Filter (kustomize at kustomizeVersion),
// but each value it sets is given a quoted style up front. kyaml otherwise
// parses every value it sets with a YAML 1.1 parser, to choose that style,
// which only the YAML text shows: the fast path's output is JSON. A
// quarter of an overlay's build went there.
type entriesFilter struct {
	pairs map[string]string
	keys  []string
	fss   kustypes.FsSlice
}

// Filter implements kio.Filter.
func (f entriesFilter) Filter(nodes []*yaml.RNode) ([]*yaml.RNode, error) {
	for _, node := range nodes {
		for _, k := range f.keys {
			err := node.PipeE(fsslice.Filter{
				FsSlice:    f.fss,
				SetValue:   quotedEntry(k, f.pairs[k]),
				CreateKind: yaml.MappingNode,
				CreateTag:  yaml.NodeTagMap,
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return nodes, nil
}

// quotedEntry is filtersutil.SetEntry of a string, its style set.
func quotedEntry(name, value string) filtersutil.SetFn {
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: value, Tag: yaml.NodeTagString, Style: yaml.DoubleQuotedStyle}
	return func(node *yaml.RNode) error {
		return node.PipeE(yaml.FieldSetter{Name: name, Value: yaml.NewRNode(n)})
	}
}

// fieldSpecs are kustomize's default field specs for the transformers the
// fast path runs, and the references its name-reference transformer
// follows.
type fieldSpecs struct {
	NameSpace                 kustypes.FsSlice `json:"namespace"`
	CommonLabels              kustypes.FsSlice `json:"commonLabels"`
	Labels                    kustypes.FsSlice `json:"labels"`
	TemplateLabels            kustypes.FsSlice `json:"templateLabels"`
	VolumeClaimTemplateLabels kustypes.FsSlice `json:"volumeClaimTemplateLabels"`
	CommonAnnotations         kustypes.FsSlice `json:"commonAnnotations"`
	NameReference             []struct {
		Kind      string           `json:"kind"`
		Referrers kustypes.FsSlice `json:"fieldSpecs"`
	} `json:"nameReference"`
}

// kustomizeFieldSpecs is kustomize's default transformer configuration
// (sigs.k8s.io/kustomize/api at kustomizeVersion), kept as kustomize ships it;
// TestFieldSpecsAreKustomizes holds it to the library's.
//
//go:embed kustomize-fieldspecs.yaml
var kustomizeFieldSpecs []byte

// defaultSpecs is kustomizeFieldSpecs parsed, with each list sorted as
// kustomize sorts it; parsed on first use, by the first fast build.
var defaultSpecs = sync.OnceValue(func() *fieldSpecs { return mustFieldSpecs(kustomizeFieldSpecs) })

// referrers are, for each kind, the kinds that may refer to it by name
// (whose references krusty's name-reference transformer rewrites).
var referrers = sync.OnceValue(func() map[string]map[string]bool { return referringKinds(defaultSpecs()) })

func mustFieldSpecs(b []byte) *fieldSpecs {
	var f fieldSpecs
	if err := sigsyaml.Unmarshal(b, &f); err != nil {
		panic(fmt.Sprintf("render: kustomize field specs: %v", err))
	}
	for _, s := range []kustypes.FsSlice{f.NameSpace, f.CommonLabels, f.Labels, f.TemplateLabels, f.VolumeClaimTemplateLabels, f.CommonAnnotations} {
		sort.Sort(s)
	}
	return &f
}

func referringKinds(f *fieldSpecs) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, nr := range f.NameReference {
		if out[nr.Kind] == nil {
			out[nr.Kind] = map[string]bool{}
		}
		for _, fs := range nr.Referrers {
			if fs.Kind == "" {
				// A reference from any kind: TestFieldSpecsAreKustomizes
				// fails, rather than the fast path guessing.
				panic("render: a kustomize name reference from every kind")
			}
			out[nr.Kind][fs.Kind] = true
		}
	}
	return out
}

// applySmPatch is resource.ApplySmPatch (kustomize at kustomizeVersion). For a kind
// kyaml holds no OpenAPI schema for (a custom resource), it merges with
// apiVersion and kind set aside, then puts them back as ApplySmPatch
// would leave them: the merge is the same, since kyaml merges such a kind
// without a schema, but it no longer makes kyaml parse and keep its
// built-in schema of every Kubernetes kind to find that out (held for the
// process's life, and more while parsed).
func applySmPatch(r, patch *resource.Resource) error {
	apiVersion, kind, patchKind := r.GetApiVersion(), r.GetKind(), patch.GetKind()
	if patchKind == "" || !schemaFree(apiVersion, kind) || !schemaFree(patch.GetApiVersion(), patchKind) {
		if !schemaFilled.Load() {
			return errNeedSchema
		}
		return r.ApplySmPatch(patch)
	}
	n, ns := r.GetName(), r.GetNamespace()
	if patch.NameChangeAllowed() || patch.KindChangeAllowed() {
		r.StorePreviousId()
	}
	for _, x := range []*yaml.RNode{&r.RNode, &patch.RNode} {
		for _, f := range []string{yaml.APIVersionField, yaml.KindField} {
			if err := x.PipeE(yaml.Clear(f)); err != nil {
				return err
			}
		}
	}
	if err := r.ApplyFilter(patchstrategicmerge.Filter{Patch: &patch.RNode}); err != nil {
		return err
	}
	if r.IsNilOrEmpty() {
		return nil
	}
	r.SetApiVersion(apiVersion)
	if patch.KindChangeAllowed() {
		kind = patchKind
	}
	r.SetKind(kind)
	if !patch.NameChangeAllowed() {
		r.SetName(n)
	}
	return r.SetNamespace(ns)
}

// schemaFree reports whether kyaml's built-in OpenAPI data has no schema
// for the kind: it is of an API group outside Kubernetes's own, and not
// one of the kinds kyaml knows the scope of (which are those it has a
// schema for).
func schemaFree(apiVersion, kind string) bool {
	group, _, ok := strings.Cut(apiVersion, "/")
	if !ok || !strings.Contains(group, ".") || strings.HasSuffix(group, ".k8s.io") || strings.HasSuffix(group, ".kubernetes.io") {
		return false
	}
	_, known := openapi.IsNamespaceScoped(yaml.TypeMeta{APIVersion: apiVersion, Kind: kind})
	return !known
}

// storePreviousID is resource.StorePreviousId (kustomize at kustomizeVersion): it
// appends the resource's name, namespace and kind to the build annotations
// that record them. kyaml's annotation setter walks the document for each
// of the three, which cost a namespace's transformer most of its time;
// this sets them on the annotations' node directly, and leaves anything
// unusual (metadata or annotations not a map, an annotation not a string)
// to kustomize's own.
func storePreviousID(r *resource.Resource) {
	id := r.CurId()
	set := []struct{ key, value string }{
		{konfig.ConfigAnnoDomain + "/previousNames", id.Name},
		{konfig.ConfigAnnoDomain + "/previousNamespaces", id.EffectiveNamespace()},
		{konfig.ConfigAnnoDomain + "/previousKinds", id.Kind},
	}
	meta := mapValue(r.YNode(), yaml.MetadataField)
	if meta == nil || meta.Kind != yaml.MappingNode {
		r.StorePreviousId()
		return
	}
	ann := mapValue(meta, yaml.AnnotationsField)
	if ann != nil && ann.Kind != yaml.MappingNode {
		r.StorePreviousId()
		return
	}
	for _, kv := range set {
		if v := mapValue(ann, kv.key); v != nil && v.Kind != yaml.ScalarNode {
			r.StorePreviousId()
			return
		}
	}
	if ann == nil {
		ann = &yaml.Node{Kind: yaml.MappingNode, Tag: yaml.NodeTagMap}
		meta.Content = append(meta.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: yaml.AnnotationsField}, ann)
	}
	for _, kv := range set {
		if kv.value == "" {
			continue
		}
		value := &yaml.Node{Kind: yaml.ScalarNode, Tag: yaml.NodeTagString, Value: kv.value, Style: yaml.SingleQuotedStyle}
		if v := mapValue(ann, kv.key); v != nil {
			value.Value = v.Value + "," + kv.value
			*v = *value
			continue
		}
		ann.Content = append(ann.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: kv.key}, value)
	}
}

// annotationsAreStrings reports whether every annotation of r is a string
// in YAML. A patch of a resource with one that is not gives way to
// krusty: what its JSON round trip makes of the value (a: 1.0 becomes 1,
// a: 1e3 stays "1e3") is not mirrored here.
func annotationsAreStrings(r *resource.Resource) bool {
	ann := mapValue(mapValue(r.YNode(), yaml.MetadataField), yaml.AnnotationsField)
	for i := 1; ann != nil && i < len(ann.Content); i += 2 {
		if v := ann.Content[i]; v.Kind != yaml.ScalarNode || v.ShortTag() != yaml.NodeTagString {
			return false
		}
	}
	return true
}

// mapValue is the value of key in mapping node n (nil: none, or n nil).
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
