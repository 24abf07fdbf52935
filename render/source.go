// SPDX-License-Identifier: Apache-2.0

package render

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// A krusty build names each object's file without kustomize's origin
// tracking: any buildMetadata makes kustomize record, on every object,
// every transformer that ran, re-encoding that record each time, which
// more than doubled a build. Instead the child hands kustomize each
// resource file with sourceAnnotation naming the file on each object in
// it (and each item of a List), and the parent takes it off again
// (withOrigin). A document that cannot carry it safely (no metadata
// mapping, annotations that are not a mapping, an anchor that another
// place shares) is left as it is: its objects are named by the
// kustomization file, as generated objects are.

// sourceAnnotation names, through a krusty build, the repository file an
// object came from; each build adds a part of its own (SourceKey), so
// that an annotation a repository sets is never mistaken for it.
const sourceAnnotation = "internal.trainops.dev/source-file"

// withSource returns raw with the annotation key set to file on every
// object it holds, or raw itself when it holds none that can carry it or
// is not YAML this code can read (kustomize then reports it as it would).
func withSource(raw []byte, key, file string) []byte {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var docs []*yaml.Node
	for {
		doc := &yaml.Node{}
		err := dec.Decode(doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return raw
		}
		docs = append(docs, doc)
	}
	changed := false
	for _, d := range docs {
		if d.Kind == yaml.DocumentNode && len(d.Content) == 1 {
			changed = annotateSource(d.Content[0], key, file, true) || changed
		}
	}
	if !changed {
		return raw
	}
	for _, d := range docs {
		tagTimestamps(d)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			return raw
		}
	}
	if err := enc.Close(); err != nil {
		return raw
	}
	if !readsBack(buf.Bytes(), docs) {
		return raw
	}
	return buf.Bytes()
}

// readsBack says whether out, read again, is docs node for node: the YAML
// encoder does not write every scalar back as it was read (a folded
// scalar with more-indented lines gains a line), and kustomize must read
// the file's own values, written as the file wrote them.
func readsBack(out []byte, docs []*yaml.Node) bool {
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for _, want := range docs {
		got := &yaml.Node{}
		if err := dec.Decode(got); err != nil || !sameNode(got, want) {
			return false
		}
	}
	return errors.Is(dec.Decode(&yaml.Node{}), io.EOF)
}

// sameNode compares what kustomize reads of two nodes: kind, tag, value,
// anchor, content, and whether a scalar is a block scalar (kustomize
// writes those back as the same encoder does, so the style decides its
// output; quoting does not), not comments or positions.
func sameNode(a, b *yaml.Node) bool {
	block := yaml.FoldedStyle | yaml.LiteralStyle
	if a.Kind != b.Kind || a.ShortTag() != b.ShortTag() || a.Value != b.Value || a.Style&block != b.Style&block ||
		a.Anchor != b.Anchor || len(a.Content) != len(b.Content) {
		return false
	}
	if a.Kind == yaml.AliasNode && (a.Alias == nil) != (b.Alias == nil) {
		return false
	}
	for i := range a.Content {
		if !sameNode(a.Content[i], b.Content[i]) {
			return false
		}
	}
	return true
}

// annotateSource sets the annotation key to file on the object n, and on
// each item when n is a List (list says whether to look for items).
func annotateSource(n *yaml.Node, key, file string, list bool) bool {
	if n.Kind != yaml.MappingNode || n.Anchor != "" {
		return false
	}
	changed := false
	if kind := mapValue(n, "kind"); list && kind != nil && strings.HasSuffix(kind.Value, "List") {
		if items := mapValue(n, "items"); items != nil && items.Kind == yaml.SequenceNode && items.Anchor == "" {
			for _, it := range items.Content {
				changed = annotateSource(it, key, file, false) || changed
			}
		}
	}
	meta := mapValue(n, "metadata")
	if meta == nil || meta.Kind != yaml.MappingNode || meta.Anchor != "" || hasMergeKey(n) || hasMergeKey(meta) {
		return changed
	}
	ann := mapValue(meta, "annotations")
	switch {
	case ann == nil:
		// In a flow mapping the encoder writes it flow: say so, so that
		// it reads back as written.
		ann = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: meta.Style & yaml.FlowStyle}
		meta.Content = append(meta.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "annotations"}, ann)
	case ann.Kind != yaml.MappingNode || ann.Anchor != "" || hasMergeKey(ann):
		return changed
	}
	if mapValue(ann, key) != nil {
		return changed // the key is this build's own: no file holds it
	}
	ann.Content = append(ann.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: file, Style: yaml.DoubleQuotedStyle})
	return true
}

// tagTimestamps gives every plain timestamp under n its tag explicitly:
// in a flow mapping the encoder quotes "10:00:00" and drops the tag, and
// the value would read back as a string.
func tagTimestamps(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.Style == 0 && n.ShortTag() == "!!timestamp" {
		n.Style = yaml.TaggedStyle
	}
	for _, c := range n.Content {
		tagTimestamps(c)
	}
}

// mapValue is the value of key in the mapping n, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Kind == yaml.ScalarNode && n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// hasMergeKey says whether the mapping n merges another in (<<): a key
// set here could then be one the merged mapping also sets.
func hasMergeKey(n *yaml.Node) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "<<" || n.Content[i+1].Kind == yaml.AliasNode && n.Content[i].Tag == "!!merge" {
			return true
		}
	}
	return false
}

// objectFromKustomize decodes one object of a build, naming the file it
// came from (withOrigin).
func objectFromKustomize(j []byte, root, dir, kfile, sourceKey string) (Object, error) {
	u := &unstructured.Unstructured{}
	// Through JSON, so numbers become int64 as the API machinery expects.
	if err := u.UnmarshalJSON(j); err != nil {
		return Object{}, &Error{File: kfile, Err: err}
	}
	return withOrigin(u, root, dir, kfile, sourceKey), nil
}

// withOrigin names the file u came from: by its annotation sourceKey
// (source.go), taken off again, or kustomize's origin annotation (finish
// drops it unless asked for); kfile when u has neither.
func withOrigin(u *unstructured.Unstructured, root, dir, kfile, sourceKey string) Object {
	ann := u.GetAnnotations()
	if file, ok := ann[sourceKey]; ok && sourceKey != "" {
		delete(ann, sourceKey)
		if len(ann) == 0 {
			unstructured.RemoveNestedField(u.Object, "metadata", "annotations")
		} else {
			u.SetAnnotations(ann)
		}
		// A transformer may have copied the whole annotations map
		// elsewhere (replacements): the key is the build's own, so any
		// map holding it got it from here.
		dropKey(u.Object, sourceKey)
		return Object{Unstructured: u, File: file}
	}
	file := kfile
	if origin, ok := ann[originAnnotation]; ok {
		var o struct {
			Path string `json:"path"`
		}
		if sigsyaml.Unmarshal([]byte(origin), &o) == nil && o.Path != "" {
			file = rel(root, filepath.Join(dir, o.Path))
		}
	}
	return Object{Unstructured: u, File: file}
}

// dropKey deletes key from every map in v.
func dropKey(v any, key string) {
	switch x := v.(type) {
	case map[string]any:
		delete(x, key)
		for _, e := range x {
			dropKey(e, key)
		}
	case []any:
		for _, e := range x {
			dropKey(e, key)
		}
	}
}
