// SPDX-License-Identifier: Apache-2.0

package render

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strconv"
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
// The annotation is written into the file's own text where its mapping
// is in block style, else the file is encoded again; either way the
// result must read back as the file's nodes and the annotation.
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
	e := &sourceEdits{key: key, value: strconv.Quote(file), inText: true}
	for _, d := range docs {
		if d.Kind == yaml.DocumentNode && len(d.Content) == 1 {
			e.annotate(d.Content[0], true)
		}
	}
	if !e.changed {
		return raw
	}
	if e.inText {
		if out, ok := e.apply(raw); ok && readsBack(out, docs) {
			return out
		}
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
	if err := enc.Close(); err != nil || !readsBack(buf.Bytes(), docs) {
		return raw
	}
	return buf.Bytes()
}

// sourceEdits are the annotations withSource adds: to the nodes, and as
// lines to insert into the file's text while inText holds.
type sourceEdits struct {
	key, value string
	changed    bool
	inText     bool
	// lines to insert, each before the line (1-based) of its mapping's
	// first key, at that key's column.
	lines []insertedLine
}

type insertedLine struct {
	before, column int
	text           string
}

// apply inserts the lines into raw; ok is false when a line it goes
// before does not start with only spaces up to its column.
func (e *sourceEdits) apply(raw []byte) ([]byte, bool) {
	lines := bytes.SplitAfter(raw, []byte("\n"))
	at := make(map[int]string, len(e.lines))
	for _, l := range e.lines {
		if l.before < 1 || l.before > len(lines) || l.column < 1 || len(lines[l.before-1]) < l.column ||
			len(bytes.TrimLeft(lines[l.before-1][:l.column-1], " ")) != 0 {
			return nil, false
		}
		at[l.before] = l.text
	}
	out := make([]byte, 0, len(raw)+len(e.lines)*(len(e.key)+len(e.value)+24))
	for i, line := range lines {
		out = append(out, at[i+1]...)
		out = append(out, line...)
	}
	return out, true
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

// annotate sets the annotation on the object n, and on each item when n
// is a List (list says whether to look for items). The key goes first
// among the annotations, where a line can be inserted into the text.
func (e *sourceEdits) annotate(n *yaml.Node, list bool) {
	if n.Kind != yaml.MappingNode || n.Anchor != "" {
		return
	}
	if kind := mapValue(n, "kind"); list && kind != nil && strings.HasSuffix(kind.Value, "List") {
		if items := mapValue(n, "items"); items != nil && items.Kind == yaml.SequenceNode && items.Anchor == "" {
			for _, it := range items.Content {
				e.annotate(it, false)
			}
		}
	}
	meta := mapValue(n, "metadata")
	if meta == nil || meta.Kind != yaml.MappingNode || meta.Anchor != "" || hasMergeKey(n) || hasMergeKey(meta) {
		return
	}
	// The value is the file's path; the text says it quoted as Go quotes
	// it, whose escapes YAML reads the same (readsBack checks).
	entry := []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: e.key},
		{Kind: yaml.ScalarNode, Tag: "!!str", Value: unquote(e.value), Style: yaml.DoubleQuotedStyle}}
	ann := mapValue(meta, "annotations")
	switch {
	case ann == nil:
		// In a flow mapping the encoder writes it flow: say so, so that
		// it reads back as written.
		ann = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: meta.Style & yaml.FlowStyle, Content: entry}
		meta.Content = append([]*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: "annotations"}, ann}, meta.Content...)
		e.insert(meta, len(meta.Content) > 2, func(pad string) string {
			return pad + "annotations:\n" + pad + "  " + e.key + ": " + e.value + "\n"
		})
	case ann.Kind != yaml.MappingNode || ann.Anchor != "" || hasMergeKey(ann) || mapValue(ann, e.key) != nil:
		return // the key is the build's own: no file holds it
	default:
		ann.Content = append(entry, ann.Content...)
		e.insert(ann, len(ann.Content) > 2, func(pad string) string { return pad + e.key + ": " + e.value + "\n" })
	}
	e.changed = true
}

// insert plans the line text(pad) before the first key of m (whose
// content the new entry now heads; hadKeys says m had keys of its own),
// where m is in block style; else the file is encoded again.
func (e *sourceEdits) insert(m *yaml.Node, hadKeys bool, text func(pad string) string) {
	if !hadKeys || m.Style&yaml.FlowStyle != 0 {
		e.inText = false
		return
	}
	first := m.Content[2]
	e.lines = append(e.lines, insertedLine{before: first.Line, column: first.Column, text: text(strings.Repeat(" ", first.Column-1))})
}

// unquote reverses strconv.Quote.
func unquote(q string) string {
	s, err := strconv.Unquote(q)
	if err != nil {
		return q
	}
	return s
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
