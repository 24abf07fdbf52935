// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/textsafe"
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

// TestGitSyncStatus: `trainops status -A` lists every GitSync with its
// readiness, revision and message; `--gitsync` describes one, its problems
// with file and object, and never prints a credential from its URL.
func TestGitSyncStatus(t *testing.T) {
	ready := gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "training"}}
	ready.Status.LastAppliedRevision = "main@sha1:aaaa"
	conditions.MarkTrue(&ready, "Ready", "Succeeded", "applied revision main@sha1:aaaa")
	stalled := gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "training"}}
	stalled.Spec.Repository = gitopsv1alpha1.GitRepository{URL: "https://deploy:s3cr3t-token@git.example.com/a.git", Branch: "main", Path: "."}
	stalled.Spec.ServiceAccountName = "deployer"
	stalled.Status.LastAttemptedRevision = "main@sha1:bbbb"
	stalled.Status.Inventory = []gitopsv1alpha1.KindCount{{Kind: "PyJob", Count: 2}}
	stalled.Status.LastError = []gitopsv1alpha1.SyncProblem{{File: "pyjobs/x.yaml", Object: "PyJob team-b/x", Message: "forbidden"}}
	stalled.Status.Contested = []gitopsv1alpha1.ContestedObject{{Object: "PyJob team-a/y", ClaimedBy: "team-c/training"}}
	conditions.MarkFalse(&stalled, "Ready", "DryRunFailed", "DryRunFailed at main@sha1:bbbb")
	conditions.MarkStalled(&stalled, "DryRunFailed", "DryRunFailed at main@sha1:bbbb")

	var list bytes.Buffer
	if err := listGitSyncs(&list, []gitopsv1alpha1.GitSync{ready, stalled}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(list.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "team-a") || !strings.Contains(lines[1], "False") || !strings.Contains(lines[2], "True") || !strings.Contains(lines[2], "main@sha1:aaaa") {
		t.Errorf("list of GitSyncs, sorted by namespace:\n%s", list.String())
	}

	var one bytes.Buffer
	if err := describeGitSync(&one, &stalled); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"team-a/training", "git.example.com/a.git", "Acts as:            deployer", "Stalled:", "DryRunFailed", "PyJob                  2", "pyjobs/x.yaml: PyJob team-b/x: forbidden", "PyJob team-a/y, by GitSync team-c/training"} {
		if !strings.Contains(one.String(), want) {
			t.Errorf("description lacks %q:\n%s", want, one.String())
		}
	}
	if strings.Contains(one.String()+list.String(), "s3cr3t-token") {
		t.Errorf("a credential of the URL was printed:\n%s", one.String())
	}
}

// TestStatusEscapesTeamText: a file name and a message holding escape
// sequences (a screen clear, an OSC 52 clipboard write) reach the output
// of `trainops status -A` and `--gitsync` escaped: no ESC or BEL byte.
func TestStatusEscapesTeamText(t *testing.T) {
	gs := gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "training"}}
	hostile := "pyjobs/\x1b[2J\x1b[Hx\x1b]52;c;aGk=\x07.yaml"
	gs.Status.LastError = []gitopsv1alpha1.SyncProblem{{File: hostile, Object: "PyJob team-b/x", Message: "bad \x9b31m"}}
	conditions.MarkFalse(&gs, "Ready", "ValidationFailed", "ValidationFailed at main: %s: refused", hostile)
	var out bytes.Buffer
	w := textsafe.NewWriter(&out) // as the status command writes
	if err := listGitSyncs(w, []gitopsv1alpha1.GitSync{gs}); err != nil {
		t.Fatal(err)
	}
	if err := describeGitSync(w, &gs); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.ContainsAny(s, "\x1b\x07\u009b") || !strings.Contains(s, `pyjobs/\x1b[2J`) {
		t.Errorf("status output:\n%q", s)
	}
}
