// SPDX-License-Identifier: Apache-2.0

package crdschema

import (
	"bytes"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainops/trainops/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite docs/api.md")

func TestAPIReferenceMatchesTheCRDs(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := s.WriteAPIReference(&b); err != nil {
		t.Fatal(err)
	}
	testenv.Golden(t, filepath.Join("..", "..", "docs", "api.md"), b.Bytes(), *update, "run make docs")
	for _, field := range []string{"`spec.workers`", "`spec.storage.output.size`", "`spec.devicePlugin.config.sharing.timeSlicing.resources[].replicas`", "`spec.monitorInterval`", "time-slicing replicas must be at least 2"} {
		if !strings.Contains(b.String(), field) {
			t.Errorf("api.md lacks %s", field)
		}
	}
}
