package crdschema

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"
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
	path := "../../docs/api.md"
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run make docs)", err)
	}
	if string(want) != b.String() {
		t.Fatal("docs/api.md is stale: run make docs")
	}
	for _, field := range []string{"`spec.workers`", "`spec.storage.output.size`", "`spec.devicePlugin.config.sharing.timeSlicing.resources[].replicas`", "`spec.monitorInterval`", "time-slicing replicas must be at least 2"} {
		if !strings.Contains(b.String(), field) {
			t.Errorf("api.md lacks %s", field)
		}
	}
}
