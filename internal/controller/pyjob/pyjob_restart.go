// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/textsafe"
)

// A distributed run whose rank fails cannot go on with a replacement: the
// other ranks wait in their collectives for a peer that never returns. So
// any worker's failure fails the PyJob's Job (builder.JobFor), and the
// reconciler decides: restart the whole run, or fail it. A restart, like a
// rerun, is three reconciles, each resumable from the status alone:
//  1. the decision is written to the status (Restarting True, the next
//     attempt, the counts);
//  2. the old Job is deleted in the foreground, and the reconciler waits
//     until it and every worker pod are gone, so a stale rank never joins
//     the new rendezvous;
//  3. the new attempt's Job is created (its AttemptAnnotation tells it from
//     the old), and Restarting turns False.

// The Restarting condition and its reasons.
const (
	RestartingCondition  = "Restarting"
	ReasonRestart        = "WorkerFailed"
	ReasonDisruption     = "Disruption"
	ReasonRerun          = "Rerun"
	ReasonRestarted      = "Restarted"
	ReasonFailOnExitCode = "FailOnExitCode"
	ReasonMaxRestarts    = "MaxRestartsReached"
	ReasonRerunIgnored   = "RerunIgnored"
)

// restartPoll is how soon a restart looks again for the old workers to be
// gone: pod deletions wake no reconcile.
const restartPoll = time.Second

// runFailure is why a PyJob's Job failed, as the restart decision reads it.
type runFailure struct {
	// disruption: a worker was preempted, evicted or lost its node.
	disruption bool
	// failFast: a worker exited with one of failurePolicy.failOnExitCodes.
	failFast bool
	// final: the Job failed in a way a restart does not mend (its
	// deadline passed).
	final bool
	// cause says which worker failed and how, for people.
	cause string
}

// causeBytes bounds a failure's cause, so that every message quoting it,
// with the words of a restart or a failure around it, stays within
// textsafe.MessageBytes.
const causeBytes = textsafe.MessageBytes - 256

// ruleIndex finds the pod failure policy rule a Job's Failed condition
// names ("... matching FailJob rule at index 1").
var ruleIndex = regexp.MustCompile(`matching FailJob rule at index (\d+)`)

// classifyFailure reads the Job's Failed condition c, and the failed
// workers' own account (workerFailure's: of a disrupted worker, and of
// the first that exited; "" when none is left). It is pure.
func classifyFailure(c *batchv1.JobCondition, disrupted, worker string) runFailure {
	f := runFailure{cause: worker}
	if f.cause == "" {
		f.cause = strings.TrimSuffix(c.Reason+": "+c.Message, ": ")
	}
	switch c.Reason {
	case batchv1.JobReasonDeadlineExceeded:
		f.final, f.cause = true, c.Reason+": "+c.Message
	case batchv1.JobReasonPodFailurePolicy:
		m := ruleIndex.FindStringSubmatch(c.Message)
		if m == nil {
			break
		}
		switch i, _ := strconv.Atoi(m[1]); i {
		case builder.DisruptionRule:
			// The other workers, stopped by the Job controller, exited
			// too: the disrupted one is the cause.
			f.disruption = true
			f.cause = disrupted
			if f.cause == "" {
				f.cause = strings.TrimSuffix(c.Message, " matching FailJob rule at index "+m[1])
			}
		case builder.FailOnExitCodeRule:
			f.failFast = true
		}
	}
	f.cause = textsafe.Bound(textsafe.Text(f.cause), causeBytes)
	return f
}

// restartDecision is what becomes of a failed run.
type restartDecision struct {
	restart, counted bool
	reason, message  string
}

// decideRestart says whether pj's failed run restarts. It is pure.
func decideRestart(pj *trainingv1alpha1.PyJob, f runFailure) restartDecision {
	max := builder.MaxRestarts(pj)
	switch {
	case f.final:
		return restartDecision{reason: "Failed", message: f.cause}
	case f.failFast:
		return restartDecision{reason: ReasonFailOnExitCode, message: "the exit code is in failurePolicy.failOnExitCodes, so the run is not restarted: " + f.cause}
	case f.disruption:
		return restartDecision{restart: true, reason: ReasonDisruption,
			message: fmt.Sprintf("a worker was disrupted (not counted as a restart): %s", f.cause)}
	case pj.Status.Restarts < max:
		return restartDecision{restart: true, counted: true, reason: ReasonRestart,
			message: fmt.Sprintf("restart %d of %d: %s", pj.Status.Restarts+1, max, f.cause)}
	}
	return restartDecision{reason: ReasonMaxRestarts,
		message: fmt.Sprintf("failed after %d restarts (maxRestarts %d); the last failure: %s", pj.Status.Restarts, max, f.cause)}
}

// restarting reports whether pj is between two attempts or runs.
func restarting(pj *trainingv1alpha1.PyJob) bool {
	return conditions.IsTrue(pj, RestartingCondition)
}

// beginRestart writes the decision to restart into pj's status; the
// reconciles that follow stop the old workers and start the new.
func (r *Reconciler) beginRestart(pj *trainingv1alpha1.PyJob, d restartDecision) {
	pj.Status.Attempt++
	if d.counted {
		pj.Status.Restarts++
	}
	msg := fmt.Sprintf("restarting every worker as attempt %d: %s", pj.Status.Attempt, d.message)
	conditions.MarkTrue(pj, RestartingCondition, d.reason, "%s", msg)
	r.Recorder.Eventf(pj, nil, corev1.EventTypeWarning, d.reason, "Restart", "%s", msg)
	pj.Status.Phase, pj.Status.Message = trainingv1alpha1.PyJobPending, msg
	status.MarkInProgress(pj, d.reason, "%s", msg)
}

// rerun starts a new run of a finished PyJob whose trainops.dev/rerun
// annotation changed; a change while the run is going is recorded and
// ignored. It reports whether a new run began.
func (r *Reconciler) rerun(pj *trainingv1alpha1.PyJob) bool {
	want := pj.Annotations[trainingv1alpha1.RerunAnnotation]
	if want == pj.Status.Rerun {
		return false
	}
	pj.Status.Rerun = want
	if !finished(pj) {
		// The first run answers it, or the run is going.
		if pj.Status.Runs > 0 {
			r.Recorder.Eventf(pj, nil, corev1.EventTypeWarning, ReasonRerunIgnored, "Rerun",
				"%s changed while run %d is going: a rerun starts only a finished run", trainingv1alpha1.RerunAnnotation, pj.Status.Runs)
		}
		return false
	}
	s := &pj.Status
	// A PyJob that finished before runs were counted ran once.
	s.Runs = max(s.Runs, 1) + 1
	s.Attempt, s.Restarts = 0, 0
	s.StartTime, s.CompletionTime = nil, nil
	s.Active, s.Succeeded, s.Failed = 0, 0, 0
	msg := fmt.Sprintf("run %d: %s is %q", s.Runs, trainingv1alpha1.RerunAnnotation, want)
	conditions.MarkTrue(pj, RestartingCondition, ReasonRerun, "%s", msg)
	r.Recorder.Eventf(pj, nil, corev1.EventTypeNormal, ReasonRerun, "Rerun", "%s", msg)
	s.Phase, s.Message = trainingv1alpha1.PyJobPending, msg
	status.MarkInProgress(pj, ReasonRerun, "%s", msg)
	return true
}

// stopOldAttempt deletes, in the foreground, a Job of an earlier attempt
// and reports whether to wait: until that Job and every worker pod of the
// PyJob are gone.
func (r *Reconciler) stopOldAttempt(ctx context.Context, pj *trainingv1alpha1.PyJob, job *batchv1.Job) (bool, error) {
	if job != nil && job.Annotations[builder.AttemptAnnotation] == builder.Attempt(pj) {
		return false, nil // the new attempt's Job
	}
	if job != nil {
		if job.DeletionTimestamp.IsZero() {
			err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationForeground), client.Preconditions{UID: &job.UID})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return true, fmt.Errorf("delete the Job of the last attempt: %w", err)
			}
		}
		return true, nil
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(pj.Namespace), client.MatchingLabels{builder.LabelPyJob: pj.Name}); err != nil {
		return true, err
	}
	return len(pods.Items) > 0, nil
}

// restarted turns Restarting False once the new attempt's Job exists.
func restarted(pj *trainingv1alpha1.PyJob, job *batchv1.Job) {
	if !restarting(pj) || job == nil || job.Annotations[builder.AttemptAnnotation] != builder.Attempt(pj) {
		return
	}
	msg := conditions.GetMessage(pj, RestartingCondition)
	conditions.MarkFalse(pj, RestartingCondition, ReasonRestarted, "run %d, attempt %d started (%s)", max(pj.Status.Runs, 1), pj.Status.Attempt, msg)
}

// torchrunFailure is one failed rank of torchrun's summary of a failed
// run ("rank : 1 (local_rank: 1)" then "exitcode : 1").
var torchrunFailure = regexp.MustCompile(`rank\s*:\s*(\d+) \(local_rank: (\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)`)

// failedRanks says which ranks torchrun's summary in a worker's
// termination message lists as failed, by rank: "rank 0 (local rank 0)
// exited with code 1, rank 1 (local rank 1) exited with code 1"; "" when
// there is no summary.
func failedRanks(msg string) string {
	seen := map[int]string{}
	for _, m := range torchrunFailure.FindAllStringSubmatch(msg, -1) {
		r, _ := strconv.Atoi(m[1])
		seen[r] = fmt.Sprintf("rank %s (local rank %s) exited with code %s", m[1], m[2], m[3])
	}
	ranks := make([]int, 0, len(seen))
	for r := range seen {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	out := make([]string, len(ranks))
	for i, r := range ranks {
		out[i] = seen[r]
	}
	// A summary is the team's text: a forged one may list any number of
	// ranks.
	return textsafe.Join(out, ", ", maxFailureMessage/2)
}

// disrupted is the first worker pod of pods with a DisruptionTarget
// condition, said as a cause, or "".
func disrupted(pods []corev1.Pod) string {
	for i := range pods {
		p := &pods[i]
		if j := slices.IndexFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue
		}); j >= 0 {
			c := p.Status.Conditions[j]
			return fmt.Sprintf("worker %s (pod %s) was disrupted: %s: %s",
				nonEmpty(p.Annotations[batchv1.JobCompletionIndexAnnotation], "0"), p.Name, c.Reason, c.Message)
		}
	}
	return ""
}
