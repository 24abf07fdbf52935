package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDocsMatchTheCode keeps docs/cli.md and docs/configuration.md equal to
// what the commands and settings say (regenerate with -update).
func TestDocsMatchTheCode(t *testing.T) {
	for name, gen := range map[string]func(*bytes.Buffer) error{
		"cli.md":           func(b *bytes.Buffer) error { return WriteCLIReference(b) },
		"configuration.md": func(b *bytes.Buffer) error { return WriteConfigReference(b) },
	} {
		var b bytes.Buffer
		if err := gen(&b); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("..", "..", "docs", name)
		if *update {
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run make docs)", err)
		}
		if d := cmp.Diff(string(want), b.String()); d != "" {
			t.Errorf("docs/%s is stale; run make docs:\n%s", name, d)
		}
	}
}
