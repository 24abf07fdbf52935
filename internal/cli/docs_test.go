// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/trainops/trainops/internal/testenv"
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
		testenv.Golden(t, filepath.Join("..", "..", "docs", name), b.Bytes(), *update, "run make docs")
	}
}
