// SPDX-License-Identifier: Apache-2.0

// Package gpuhealthtest reads the DCGM exporter samples of testdata/dcgm
// for the tests that serve or parse them.
package gpuhealthtest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Sample is the file testdata/dcgm/name, as dcgm-exporter's /metrics
// serves it; a missing file fails t.
func Sample(t testing.TB, name string) []byte {
	t.Helper()
	b, err := Read(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Read is the file testdata/dcgm/name.
func Read(name string) ([]byte, error) {
	_, file, _, _ := runtime.Caller(0)
	return os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata", "dcgm", name))
}
