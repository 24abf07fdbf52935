// SPDX-License-Identifier: Apache-2.0

package render

import (
	"bytes"
	"encoding/json"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// FuzzSourceKeepsTheObjects: whatever a resource file holds, kustomize's
// own reader reads the same objects from withSource's output as from the
// file, but the build's key; a file it cannot read is left as it was.
func FuzzSourceKeepsTheObjects(f *testing.F) {
	for _, s := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  annotations: {a: 1.0, b: ~, c: 0x10}\ndata: {k: v}\n",
		"apiVersion: v1\nkind: ConfigMapList\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n",
		"apiVersion: v1\nkind: Service\nmetadata: &m {name: web}\nspec: {selector: *m}\n",
		"# a comment\n---\napiVersion: v1\nkind: A\nmetadata:\n  name: a\n  labels: &l {x: y}\n  annotations:\n    <<: *l\n---\n",
		"apiVersion: v1\nkind: A\nmetadata:\n  name: 'quoted: yes'\n  annotations:\n    long: >-\n      folded\n      text\n    lit: |\n      two\n      lines\n",
		"[1, 2]\n", "kind: [\n", "",
		"apiVersion: v1\nkind: A\nmetadata: {name: a}\ndata: &a [*a]\n",
	} {
		f.Add([]byte(s))
	}
	const key = sourceAnnotation + ".fuzz"
	f.Fuzz(func(t *testing.T, raw []byte) {
		// kustomize's reader expands aliases: a handful nested can take it
		// minutes (the render child's deadline bounds that in a build).
		if bytes.Count(raw, []byte("*")) > 4 {
			return
		}
		out := withSource(raw, key, "dir/file.yaml")
		// kustomize's reader follows an alias into its own anchor until
		// the stack overflows; a render refuses such a file before
		// kustomize reads it (TestKustomizeInputsWithinLimits).
		if aliasesItself(raw) {
			return
		}
		before, errBefore := kio.FromBytes(raw)
		if bytes.Equal(out, raw) {
			return
		}
		after, errAfter := kio.FromBytes(out)
		if errBefore != nil && errAfter != nil {
			return // kustomize refuses the file either way
		}
		if errBefore != nil || errAfter != nil {
			t.Fatalf("read before: %v, after: %v\n%s", errBefore, errAfter, out)
		}
		if len(before) != len(after) {
			t.Fatalf("%d objects before, %d after\n%s", len(before), len(after), out)
		}
		for i := range before {
			a, errA := before[i].MarshalJSON()
			b, errB := after[i].MarshalJSON()
			if (errA == nil) != (errB == nil) {
				t.Fatalf("object %d: JSON before: %v, after: %v", i, errA, errB)
			}
			if errA != nil {
				continue
			}
			var va, vb any
			if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
				t.Fatalf("object %d: not JSON", i)
			}
			// kustomize drops an empty annotations map from its output
			// (annotations: {} builds to none), and so does withOrigin.
			dropKey(vb, key)
			emptyAnnotations(va)
			emptyAnnotations(vb)
			ja, _ := json.Marshal(va)
			jb, _ := json.Marshal(vb)
			if !bytes.Equal(ja, jb) {
				t.Fatalf("object %d:\nbefore %s\nafter  %s\nfile:\n%s", i, ja, jb, out)
			}
		}
	})
}

// aliasesItself says whether an alias in raw stands inside the node its
// anchor names.
func aliasesItself(raw []byte) bool {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		doc := &yaml.Node{}
		if dec.Decode(doc) != nil {
			return false
		}
		if cycles(doc, map[*yaml.Node]bool{}) {
			return true
		}
	}
}

// cycles walks n, through aliases, with open holding the nodes it is
// inside.
func cycles(n *yaml.Node, open map[*yaml.Node]bool) bool {
	if open[n] {
		return true
	}
	open[n] = true
	defer delete(open, n)
	if n.Kind == yaml.AliasNode && n.Alias != nil && cycles(n.Alias, open) {
		return true
	}
	for _, c := range n.Content {
		if cycles(c, open) {
			return true
		}
	}
	return false
}

// emptyAnnotations takes off an annotations map that holds nothing once
// the key is gone, as withOrigin does, in v and in its List's items.
func emptyAnnotations(v any) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	if meta, ok := m["metadata"].(map[string]any); ok {
		if ann, ok := meta["annotations"].(map[string]any); ok && len(ann) == 0 {
			delete(meta, "annotations")
		}
	}
	if items, ok := m["items"].([]any); ok {
		for _, it := range items {
			emptyAnnotations(it)
		}
	}
}
