// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"fmt"
	"sort"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/textsafe"
)

// pyjobObservation is what a PyJob's status is computed from.
type pyjobObservation struct {
	// job is the PyJob's Job, nil when it does not exist.
	job *batchv1.Job
	// failure says why the run failed for good (decideRestart's message,
	// naming the worker, its exit code and termination message), and
	// failureReason is its reason; read once the Job has failed.
	failure, failureReason string
	// stuck says why a worker cannot start (its image cannot be pulled,
	// say), stuckReason is the kubelet's reason; empty when none is.
	stuck, stuckReason string
	// queue is what Kueue says of a queued Job (see queued).
	queue queueState
}

// pyjobPhase is a phase with the reason and message that explain it.
type pyjobPhase struct {
	phase   trainingv1alpha1.PyJobPhase
	reason  string
	message string
}

// finished reports whether a PyJob has reached Succeeded or Failed; its Job
// may be gone since (ttlSecondsAfterFinished) and must not run again.
func finished(pj *trainingv1alpha1.PyJob) bool {
	return pj.Status.Phase == trainingv1alpha1.PyJobSucceeded || pj.Status.Phase == trainingv1alpha1.PyJobFailed
}

// computePyJobPhase maps the Job's state to the PyJob's phase. It is pure.
func computePyJobPhase(pj *trainingv1alpha1.PyJob, obs pyjobObservation) pyjobPhase {
	job := obs.job
	workers := max(pj.Spec.Workers, 1)
	if job == nil {
		if finished(pj) {
			return pyjobPhase{pj.Status.Phase, conditionReason(pj), pj.Status.Message}
		}
		if pj.Status.StartTime != nil {
			return pyjobPhase{trainingv1alpha1.PyJobFailed, ReasonJobDeleted,
				fmt.Sprintf("Job %s was deleted before it finished; the PyJob does not run twice: create a PyJob under a new name to run it again", pj.Status.JobName)}
		}
		return pyjobPhase{trainingv1alpha1.PyJobPending, status.ReasonProgressing, "creating the training Job"}
	}
	if c := jobCondition(job, batchv1.JobComplete); c != nil {
		return pyjobPhase{trainingv1alpha1.PyJobSucceeded, status.ReasonSucceeded, fmt.Sprintf("%d/%d workers succeeded", job.Status.Succeeded, workers)}
	}
	if c := jobCondition(job, batchv1.JobFailed); c != nil {
		if pj.Status.Phase == trainingv1alpha1.PyJobFailed && obs.failure == "" {
			return pyjobPhase{pj.Status.Phase, conditionReason(pj), pj.Status.Message} // the failure already told
		}
		if obs.failure != "" {
			return pyjobPhase{trainingv1alpha1.PyJobFailed, nonEmpty(obs.failureReason, "Failed"), obs.failure}
		}
		msg := c.Reason
		if c.Message != "" {
			msg = c.Reason + ": " + c.Message
		}
		return pyjobPhase{trainingv1alpha1.PyJobFailed, nonEmpty(c.Reason, "Failed"), msg}
	}
	if ptr.Deref(job.Spec.Suspend, false) {
		if ptr.Deref(pj.Spec.Suspend, false) {
			return pyjobPhase{trainingv1alpha1.PyJobSuspended, status.ReasonSuspended, "suspended by spec.suspend: set it to false to resume"}
		}
		if pj.Spec.QueueName != "" {
			return pyjobPhase{trainingv1alpha1.PyJobQueued, ReasonQueued, queuedMessage(pj, obs.queue)}
		}
		return pyjobPhase{trainingv1alpha1.PyJobSuspended, status.ReasonSuspended, "the Job is suspended"}
	}
	// A run that has been Running stays Running while its Job has pods:
	// a worker restarting in place (its rendezvous not ready yet, a
	// container restart) or stuck says why in the message, but the run
	// does not go back to waiting.
	phase := trainingv1alpha1.PyJobPending
	if pj.Status.Phase == trainingv1alpha1.PyJobRunning && job.Status.Active > 0 {
		phase = trainingv1alpha1.PyJobRunning
	}
	if obs.stuck != "" {
		// A distributed run waits for every rank: one stuck worker holds
		// them all.
		return pyjobPhase{phase, obs.stuckReason, obs.stuck}
	}
	// A worker that finished first (its rank done, the others still at
	// work) started too: the run stays Running, never back to Pending.
	ready := ptr.Deref(job.Status.Ready, 0)
	if done := job.Status.Succeeded; ready > 0 || done > 0 {
		msg := fmt.Sprintf("%d/%d workers running", ready, workers)
		if done > 0 {
			msg += fmt.Sprintf(", %d finished", done)
		}
		return pyjobPhase{trainingv1alpha1.PyJobRunning, status.ReasonProgressing, msg}
	}
	if job.Status.Failed > 0 {
		return pyjobPhase{phase, status.ReasonProgressing, fmt.Sprintf("retrying after %d failed worker pods (backoffLimit %d)", job.Status.Failed, ptr.Deref(job.Spec.BackoffLimit, 0))}
	}
	return pyjobPhase{phase, status.ReasonProgressing, fmt.Sprintf("waiting for %d workers to be scheduled and started", workers)}
}

// SetPyJobStatus writes into pj the status trainops gives it when its Job
// is job (nil: not created yet), as a reconcile of that generation would;
// the benchmark's floor writes the same.
func SetPyJobStatus(pj *trainingv1alpha1.PyJob, job *batchv1.Job) {
	obs := pyjobObservation{job: job}
	applyPyJobStatus(pj, obs, computePyJobPhase(pj, obs))
	status.Observe(pj)
}

// applyPyJobStatus writes the observation into pj.Status and its conditions.
func applyPyJobStatus(pj *trainingv1alpha1.PyJob, obs pyjobObservation, p pyjobPhase) {
	s := &pj.Status
	s.Phase, s.Message = p.phase, textsafe.Bound(textsafe.Text(p.message), textsafe.MessageBytes)
	if job := obs.job; job != nil {
		s.JobName = job.Name
		s.Runs = max(s.Runs, 1)
		s.Active, s.Succeeded, s.Failed = job.Status.Active, job.Status.Succeeded, job.Status.Failed
		if job.Status.StartTime != nil && s.StartTime == nil {
			s.StartTime = job.Status.StartTime.DeepCopy()
		}
		switch {
		case job.Status.CompletionTime != nil:
			s.CompletionTime = job.Status.CompletionTime.DeepCopy()
		case jobCondition(job, batchv1.JobFailed) != nil && s.CompletionTime == nil:
			t := jobCondition(job, batchv1.JobFailed).LastTransitionTime
			s.CompletionTime = &metav1.Time{Time: t.Time}
		}
	}
	s.Queue = nil
	if p.phase == trainingv1alpha1.PyJobQueued {
		s.Queue = queueStatus(obs.queue)
	}
	switch p.phase {
	case trainingv1alpha1.PyJobSucceeded:
		status.MarkDone(pj, true, status.ReasonSucceeded, "%s", p.message)
	case trainingv1alpha1.PyJobFailed:
		status.MarkStalled(pj, p.reason, "%s", p.message)
	case trainingv1alpha1.PyJobSuspended:
		status.MarkDone(pj, false, status.ReasonSuspended, "%s", p.message)
	case trainingv1alpha1.PyJobQueued:
		// A queue may hold a Job for days: waiting there is a settled
		// state, as a suspended one is, not progress to wait for.
		status.MarkDone(pj, false, ReasonQueued, "%s", p.message)
	default:
		status.MarkInProgress(pj, status.ReasonProgressing, "%s", p.message)
	}
}

// failedCondition is job's Failed condition; nil when job is nil or has
// not failed.
func failedCondition(job *batchv1.Job) *batchv1.JobCondition {
	if job == nil {
		return nil
	}
	return jobCondition(job, batchv1.JobFailed)
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		if c := &job.Status.Conditions[i]; c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func conditionReason(pj *trainingv1alpha1.PyJob) string {
	for _, c := range pj.Status.Conditions {
		if c.Type == status.ReadyCondition {
			return c.Reason
		}
	}
	return string(pj.Status.Phase)
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// maxFailureMessage bounds the termination message quoted in a PyJob's
// status, which is read by people and kept in etcd with every status
// write; the pod's own termination message is longer.
const maxFailureMessage = 1024

// workerFailure reads the Job's pods, once the Job has failed, and says
// how the run's failure came: of a worker disrupted (preempted, evicted),
// and of the first worker to exit with an error, its completion index,
// exit code, the rank torchrun names, and its termination message (the
// end of its log, by the trainer's policy). It reads the API server
// directly: the cache keeps of a pod only why it cannot start
// (pyjob_pods.go), and this read happens once per failed Job. "" for what
// no pod is left to tell.
func (r *Reconciler) workerFailure(ctx context.Context, job *batchv1.Job) (disruptedCause, exited string) {
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		log.FromContext(ctx).Error(err, "list the failed Job's pods for their termination message", "job", job.Name)
		return "", ""
	}
	disruptedCause = disrupted(pods.Items)
	type exit struct {
		pod   *corev1.Pod
		state *corev1.ContainerStateTerminated
	}
	var exits []exit
	for i := range pods.Items {
		p := &pods.Items[i]
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; cs.Name == builder.TrainerContainer && t != nil && t.ExitCode != 0 {
				exits = append(exits, exit{p, t})
			}
		}
	}
	if len(exits) == 0 {
		return disruptedCause, ""
	}
	// The first to finish, then by index: in a distributed run one rank's
	// failure makes its peers fail within moments, so every failed worker
	// is named, with the ranks torchrun says failed in it.
	index := func(p *corev1.Pod) string { return nonEmpty(p.Annotations[batchv1.JobCompletionIndexAnnotation], "0") }
	sort.SliceStable(exits, func(i, j int) bool {
		a, b := exits[i], exits[j]
		if !a.state.FinishedAt.Equal(&b.state.FinishedAt) {
			return a.state.FinishedAt.Before(&b.state.FinishedAt)
		}
		return index(a.pod) < index(b.pod)
	})
	var parts []string
	for i, e := range exits {
		part := fmt.Sprintf("worker %s (pod %s) exited with code %d", index(e.pod), e.pod.Name, e.state.ExitCode)
		if i > 0 {
			part = fmt.Sprintf("worker %s (pod %s) with code %d", index(e.pod), e.pod.Name, e.state.ExitCode)
		}
		if e.state.Reason != "" && e.state.Reason != "Error" {
			part += " (" + e.state.Reason + ")"
		}
		if ranks := failedRanks(e.state.Message); ranks != "" {
			part += " [" + ranks + "]"
		}
		parts = append(parts, part)
	}
	out := parts[0]
	if len(parts) > 1 {
		out += ", then " + textsafe.Join(parts[1:], ", ", maxFailureMessage)
	}
	line := resolverLine(exits[0].state.Message)
	if line == "" && r.Logs != nil {
		// The termination message is the log's last few lines; a rank's
		// resolver errors come before its long traceback.
		if tail, err := r.Logs(ctx, exits[0].pod.Namespace, exits[0].pod.Name, builder.TrainerContainer); err == nil {
			line = resolverLine(tail)
		}
	}
	if line != "" {
		out += "; the resolver said: " + line
	}
	if msg := failureText(exits[0].state.Message); msg != "" {
		out += ": " + msg
	}
	// A worker's message and log are the team's text: escaped, bounded.
	return textsafe.Bound(textsafe.Text(disruptedCause), textsafe.MessageBytes), textsafe.Bound(textsafe.Text(out), textsafe.MessageBytes)
}

// resolverErrors are the C library's messages for a name that cannot be
// resolved (gai_strerror), which a rank's log quotes when it cannot find
// its master: a DNS failure reads as a timeout otherwise.
var resolverErrors = []string{
	"Temporary failure in name resolution", "Name or service not known",
	"No address associated with hostname", "Name does not resolve",
}

// resolverLine is the last line of a termination message that quotes the
// resolver's error, trimmed; "" when none does.
func resolverLine(message string) string {
	lines := strings.Split(message, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		for _, e := range resolverErrors {
			if strings.Contains(lines[i], e) {
				return clip(strings.TrimSpace(lines[i]))
			}
		}
	}
	return ""
}

// failureText is a termination message as a status quotes it: its last
// line first (a traceback's exception, the error a program printed last),
// then the end of the lines before it, within maxFailureMessage bytes.
func failureText(message string) string {
	msg := strings.TrimSpace(message)
	// A summary's closing rule (torchrun's "=====") says nothing.
	for i := strings.LastIndexByte(msg, '\n'); i >= 0 && strings.Trim(msg[i+1:], "=-*_ \t") == ""; i = strings.LastIndexByte(msg, '\n') {
		msg = strings.TrimSpace(msg[:i])
	}
	i := strings.LastIndexByte(msg, '\n')
	if i < 0 {
		return clip(msg)
	}
	last, before := strings.TrimSpace(msg[i+1:]), strings.TrimSpace(msg[:i])
	room := maxFailureMessage - len(last) - 1
	if room <= 0 {
		return clip(last)
	}
	if len(before) > room {
		before = "…" + strings.ToValidUTF8(before[len(before)-room:], "")
	}
	return last + "\n" + before
}

// clip is s within maxFailureMessage bytes.
func clip(s string) string {
	if len(s) <= maxFailureMessage {
		return s
	}
	return strings.ToValidUTF8(s[:maxFailureMessage], "") + "…"
}
