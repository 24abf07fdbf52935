package render_test

import (
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
	f.Fuzz(func(t *testing.T, data []byte) {
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
