// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"errors"
	"strings"
	"testing"

	"github.com/trainops/trainops/internal/notify"
)

func TestCommitStatusSaysWhatIsNew(t *testing.T) {
	sha := strings.Repeat("c", 40)
	rev, before := "main@sha1:"+sha, "main@sha1:"+strings.Repeat("b", 40)
	refused := &SyncError{Reason: ReasonValidationFailed, Revision: rev, Problems: []Problem{{File: "jobs/bert.yaml", Object: "PyJob ml/bert", Message: "spec.gpu: must be at least 1"}}}
	for _, tc := range []struct {
		name        string
		rev, before string
		res         Result
		err         error
		ok          bool
		state       notify.State
		want        string
	}{
		{"new revision applied", rev, before, Result{Applied: []string{"a"}, Unchanged: 3}, nil, true, notify.Success, "applied: 1 objects changed, 3 unchanged"},
		{"drift put back", rev, rev, Result{Applied: []string{"a", "b"}}, nil, true, notify.Success, "drift put back: 2 objects"},
		{"nothing new", rev, rev, Result{Unchanged: 4}, nil, false, "", ""},
		{"refused", rev, before, Result{}, refused, true, notify.Failure, "ValidationFailed: jobs/bert.yaml: PyJob ml/bert: spec.gpu"},
		{"failed on the way: retried", rev, before, Result{}, errors.New("connection refused"), false, "", ""},
		{"fetch failed", "", before, Result{}, errors.New("fetch"), false, "", ""},
	} {
		st, ok := CommitStatus(tc.rev, tc.before, tc.res, tc.err)
		if ok != tc.ok || (ok && (st.State != tc.state || st.Commit != sha || !strings.HasPrefix(st.Description, tc.want))) {
			t.Errorf("%s: %+v %v", tc.name, st, ok)
		}
	}
}

// TestSyncNewsNamesTheReason: an alert says Applied, DriftRepaired or the
// refusal's reason, the first problem and how many more; a revision that
// names no commit still has news for an alert, but no commit status.
func TestSyncNewsNamesTheReason(t *testing.T) {
	rev := "main@sha1:" + strings.Repeat("d", 40)
	refused := &SyncError{Reason: ReasonValidationFailed, Revision: "v1.2", Problems: []Problem{
		{File: "jobs/a.yaml", Object: "PyJob ml/a", Message: "spec.gpu: must be at least 1"},
		{File: "jobs/b.yaml", Object: "PyJob ml/b", Message: "spec.gpu: must be at least 1"},
		{File: "jobs/c.yaml", Object: "PyJob ml/c", Message: "spec.gpu: must be at least 1"},
	}}
	a, ok := SyncNews("v1.2", rev, Result{}, refused)
	if !ok || a.State != notify.Failure || a.Reason != ReasonValidationFailed || a.Commit != "" ||
		!strings.HasPrefix(a.Message, "ValidationFailed: jobs/a.yaml") || !strings.HasSuffix(a.Message, "(and 2 more)") {
		t.Errorf("refused: %+v %v", a, ok)
	}
	if _, ok := CommitStatus("v1.2", rev, Result{}, refused); ok {
		t.Error("a commit status for a revision naming no commit")
	}
	if a, ok := SyncNews(rev, rev, Result{Pruned: []string{"x"}}, nil); !ok || a.Reason != "DriftRepaired" || a.Commit != strings.Repeat("d", 40) {
		t.Errorf("drift: %+v %v", a, ok)
	}
}
