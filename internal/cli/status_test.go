package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/trainops/trainops/internal/gitops"
)

// TestDescribe: `trainops status` names the repository, the revisions and
// when, the objects by kind and the last error.
func TestDescribe(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	inv := &gitops.Inventory{
		Repo:                  "https://git.example.com/ml/training-config.git",
		LastAppliedRevision:   "main@sha1:aaaa",
		LastAppliedTime:       now.Add(-90 * time.Second),
		LastAttemptedRevision: "main@sha1:bbbb",
		LastAttemptedTime:     now.Add(-30 * time.Second),
		LastError:             "ValidationFailed: pyjobs/bert.yaml: PyJob ml/bert: spec.gpu: must be at least 0",
		Entries: map[string]gitops.Entry{
			"a": {Kind: "PyJob"}, "b": {Kind: "PyJob"}, "c": {Kind: "SREAgent"},
		},
	}
	var out bytes.Buffer
	if err := describe(&out, inv, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{inv.Repo, "State:              failing", "main@sha1:aaaa", "(1m30s ago)", "main@sha1:bbbb", "Objects:            3", "PyJob                  2", "SREAgent               1", "spec.gpu"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}
