// SPDX-License-Identifier: Apache-2.0

package render

import (
	"bytes"
	"errors"
	"io"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"
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
	return buf.Bytes()
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
		ann = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
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
