// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/notify"
)

// What a sync reports: its result, and why it refused a revision.

// Result says what a sync did.
type Result struct {
	Revision  string
	Applied   []string
	Unchanged int
	// Reused is how many objects came from the last render's record of
	// their unchanged files, which this sync did not parse again.
	Reused   int
	Pruned   []string
	Skipped  []string // kept despite leaving Git (annotation, retained claims)
	Duration time.Duration
	// Phases times each step (render, plan, dryRun, apply, prune), for
	// the log.
	Phases map[string]time.Duration
	// Counts are what the sync holds after it, by kind.
	Counts map[string]int
}

// PhaseSummary is the time of each step, as "fetch=<duration>
// render=<duration> …", for logs.
func (r Result) PhaseSummary() string {
	phases := make([]string, 0, len(r.Phases))
	for _, p := range []string{"fetch", "render", "plan", "dryRun", "apply", "prune"} {
		if d, ok := r.Phases[p]; ok {
			phases = append(phases, p+"="+d.Round(time.Millisecond).String())
		}
	}
	return strings.Join(phases, " ")
}

// phase records the time since *mark under name and moves the mark.
func (r *Result) phase(name string, mark *time.Time) {
	if r.Phases == nil {
		r.Phases = map[string]time.Duration{}
	}
	now := time.Now()
	r.Phases[name] += now.Sub(*mark)
	*mark = now
}

// Problem is one reason a revision was refused (see check.Problem).
type Problem = check.Problem

// SyncError is a refused or failed sync.
type SyncError struct {
	// Reason is CamelCase: RenderFailed, ValidationFailed, DryRunFailed,
	// ApplyFailed, PruneBudgetExceeded, EmptyRender, FetchFailed...
	Reason   string
	Revision string
	Problems []Problem
}

func (e *SyncError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", e.Reason)
	if e.Revision != "" {
		fmt.Fprintf(&b, " at %s", e.Revision)
	}
	if len(e.Problems) == 1 {
		fmt.Fprintf(&b, ": %s", e.Problems[0])
		return b.String()
	}
	fmt.Fprintf(&b, ": %d problems:", len(e.Problems))
	for _, p := range e.Problems {
		fmt.Fprintf(&b, "\n  - %s", p)
	}
	return b.String()
}

// Why a sync fails: the Reason of its SyncError, in metrics
// (trainops_sync_failures_total{reason}), Events and the inventory.
const (
	// ReasonRenderFailed: the revision does not render.
	ReasonRenderFailed = "RenderFailed"
	// ReasonEmptyRender: the revision renders no objects and allowEmpty
	// is off.
	ReasonEmptyRender = "EmptyRender"
	// ReasonValidationFailed: an object breaks a rule of the repository
	// (kinds, namespaces, fields) or its schema.
	ReasonValidationFailed = "ValidationFailed"
	// ReasonTakeoverRefused: an object exists that trainops did not create.
	ReasonTakeoverRefused = "TakeoverRefused"
	// ReasonDryRunFailed: the API server refused an object in a dry run.
	ReasonDryRunFailed = "DryRunFailed"
	// ReasonForbidden: the sync's identity (a GitSync's ServiceAccount)
	// may not even read an object the revision names.
	ReasonForbidden = "Forbidden"
	// ReasonPruneBudgetExceeded: the revision removes more than
	// pruneBudget allows.
	ReasonPruneBudgetExceeded = "PruneBudgetExceeded"
	// ReasonApplyFailed: applying an object failed; the revision was
	// rolled back.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonPruneFailed: deleting an object that left Git failed.
	ReasonPruneFailed = "PruneFailed"
	// ReasonDecryptionFailed: the keys that decrypt the revision could not
	// be read.
	ReasonDecryptionFailed = "DecryptionFailed"
)

// ReasonOf is the CamelCase reason of a sync error.
func ReasonOf(err error) string {
	var se *SyncError
	if errors.As(err, &se) {
		return se.Reason
	}
	type reasoner interface{ Reason() string }
	var r reasoner
	if errors.As(err, &r) {
		return r.Reason()
	}
	return "Error"
}

// SyncNews is what a sync of revision has to tell (appliedBefore is the
// revision the sync applied last): ok is false when there is nothing new
// (a fetch that failed, a re-sync that changed nothing, a failure on the
// way that is retried). The alert's Source is left to the caller.
func SyncNews(revision, appliedBefore string, res Result, err error) (notify.Alert, bool) {
	a := notify.Alert{Revision: revision, Commit: notify.Commit(revision)}
	var se *SyncError
	switch {
	case revision == "":
		return a, false
	case err == nil && revision != appliedBefore:
		a.State, a.Reason = notify.Success, "Applied"
		a.Message = fmt.Sprintf("applied: %d objects changed, %d unchanged, %d pruned", len(res.Applied), res.Unchanged, len(res.Pruned))
	case err == nil && len(res.Applied)+len(res.Pruned) > 0:
		a.State, a.Reason = notify.Success, "DriftRepaired"
		a.Message = fmt.Sprintf("drift put back: %d objects applied again, %d pruned", len(res.Applied), len(res.Pruned))
	case err == nil:
		return a, false
	case errors.As(err, &se) && se.Revision != "":
		a.State, a.Reason = notify.Failure, se.Reason
		a.Message = se.Reason
		if len(se.Problems) > 0 {
			a.Message += ": " + se.Problems[0].String()
		}
		if more := len(se.Problems) - 1; more > 0 {
			a.Message += fmt.Sprintf(" (and %d more)", more)
		}
	default:
		return a, false
	}
	return a, true
}

// CommitStatus is what a forge's commit status says of a sync of
// revision, when there is news (SyncNews) and the revision names a commit.
func CommitStatus(revision, appliedBefore string, res Result, err error) (notify.Status, bool) {
	a, ok := SyncNews(revision, appliedBefore, res, err)
	if !ok || a.Commit == "" {
		return notify.Status{}, false
	}
	return notify.Status{Commit: a.Commit, State: a.State, Description: a.Message}, true
}
