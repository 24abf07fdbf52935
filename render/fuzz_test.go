// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/trainops/trainops/render"
)

// FuzzParse feeds arbitrary bytes to the YAML reader every repository file
// goes through: it must return objects or an error, never panic, and every
// object it returns must have apiVersion, kind and name.
func FuzzParse(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"))
	f.Add([]byte("---\n# only a comment\n---\napiVersion: v1\nkind: List\nmetadata:\n  name: l\nitems: []\n"))
	f.Add([]byte("a: &a [1,2]\nb: &b [*a,*a]\nc: [*b,*b]\n"))
	f.Add([]byte("kind: [\n"))
	for _, doc := range directCorpus {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameBothWays(t, data)
		objs, err := render.Parse(data)
		if err != nil {
			return
		}
		for _, o := range objs {
			if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
				t.Fatalf("object without apiVersion, kind or name: %v", o.Object)
			}
			_ = o.DeepCopy() // numbers must be JSON-compatible
		}
	})
}

// directCorpus are documents whose YAML the direct decode must read as
// the JSON path does: numbers, keys that are not strings, nulls, odd
// scalars.
var directCorpus = []string{
	"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n",
	"apiVersion: v1\nkind: X\nmetadata:\n  name: a\nspec:\n  n: [1, -7, 1.0, 1.5, -0.0, 2.5e3, 1e21, 1e20, 1e-7, 0.000001, 12345678901234567890, 9223372036854775807, -9223372036854775808, 0x1F, 0o17, 017, 1_000, +5]\n",
	"apiVersion: v1\nkind: X\nmetadata:\n  name: a\nspec:\n  1: a\n  2.5: b\n  true: c\n  ~: d\n",
	"apiVersion: v1\nkind: X\nmetadata:\n  name: a\nspec:\n  s: [yes, no, on, off, y, n, ~, null, '', \"\", 2024-01-01, 2024-01-01T10:00:00Z, !!binary aGk=, \"\\u00e9\", <&>]\n",
	"apiVersion: v1\nkind: X\nmetadata:\n  name: a\nspec: {a: {b: [{c: 1}, [2, 3.25]]}, .inf: 1, 1e3: x}\n",
	"apiVersion: v1\nkind: X\nmetadata:\n  name: a\nspec:\n  f: .inf\n",
	"apiVersion: a/b/c\nkind: X\nmetadata:\n  name: a\n",
	"kind: X\nmetadata:\n  name: a\n",
	"apiVersion: v1\nkind: 5\nmetadata:\n  name: a\n",
	"- a\n- b\n",
	"~\n",
}

// TestDirectDecodeMatchesJSON holds Parse's direct decode to the JSON path
// it replaces, over directCorpus.
func TestDirectDecodeMatchesJSON(t *testing.T) {
	var direct int
	for _, doc := range directCorpus {
		if sameBothWays(t, []byte(doc)) {
			direct++
		}
	}
	if direct < 5 {
		t.Errorf("the direct decode took %d of %d documents: the corpus no longer exercises it", direct, len(directCorpus))
	}
	// An alias is its own copy in each place, as the JSON path makes it:
	// changing one (defaulting does) leaves the other alone.
	objs, err := render.Parse([]byte("apiVersion: v1\nkind: X\nmetadata:\n  name: a\nspec:\n  a: &x {k: 1}\n  b: *x\n"))
	if err != nil || len(objs) != 1 {
		t.Fatalf("an aliased document: %v, %d objects", err, len(objs))
	}
	spec := objs[0].Object["spec"].(map[string]any)
	spec["a"].(map[string]any)["k"] = int64(2)
	if b := spec["b"].(map[string]any)["k"]; b != int64(1) {
		t.Errorf("changing spec.a changed its alias spec.b to %v", b)
	}
}

// sameBothWays fails t when the direct decode of doc took it and made
// another object than the JSON path, or took a document the JSON path
// refuses; it reports whether the direct decode took doc.
func sameBothWays(t *testing.T, doc []byte) bool {
	t.Helper()
	direct, ok, viaJSON, err := render.DecodeBothWays(doc)
	if !ok {
		return false
	}
	if direct == nil {
		// A null document: the JSON path reads "null", which Parse skips.
		return true
	}
	if err != nil {
		t.Fatalf("the direct decode read %q, which the JSON path refuses: %v", doc, err)
	}
	if !reflect.DeepEqual(direct, viaJSON) {
		t.Fatalf("%q:\ndirect    %#v\nvia JSON  %#v", doc, direct, viaJSON)
	}
	return true
}

func TestAliasBombIsRefused(t *testing.T) {
	// A "billion laughs" document: each level doubles the last.
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\ndata:\n  a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	for i := 1; i < 10; i++ {
		b.WriteString("  a")
		b.WriteString(strings.Repeat("", 0))
		b.WriteString(string(rune('0' + i)))
		b.WriteString(": &a" + string(rune('0'+i)) + " [")
		for j := 0; j < 9; j++ {
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	if _, err := render.Parse([]byte(b.String())); err == nil {
		t.Fatal("an alias bomb was expanded")
	}
}
