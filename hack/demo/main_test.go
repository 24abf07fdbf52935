// SPDX-License-Identifier: Apache-2.0

package main

import (
	"path/filepath"
	"testing"

	"github.com/trainops/trainops/internal/testenv"
)

// TestDemoOnce runs the README's first command as `DEMO_ONCE=1 make demo`
// does, with a freshly built trainops: it must settle and exit cleanly.
func TestDemoOnce(t *testing.T) {
	dir := t.TempDir()
	bin := testenv.BuildTrainops(t)
	t.Setenv("TRAINOPS_BIN", bin)
	t.Setenv("DEMO_ONCE", "1")
	t.Setenv("DEMO_DIR", filepath.Join(dir, "demo"))
	if err := run(); err != nil {
		t.Fatalf("demo: %v", err)
	}
}
