// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/status"
)

func TestComputePyJobPhase(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	pj := func(mut func(*trainingv1alpha1.PyJob)) *trainingv1alpha1.PyJob {
		p := &trainingv1alpha1.PyJob{Spec: trainingv1alpha1.PyJobSpec{Workers: 2}}
		if mut != nil {
			mut(p)
		}
		return p
	}
	job := func(mut func(*batchv1.Job)) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "x-job"}, Spec: batchv1.JobSpec{Suspend: ptr.To(false), BackoffLimit: ptr.To(int32(3))}}
		if mut != nil {
			mut(j)
		}
		return j
	}
	cond := func(t batchv1.JobConditionType, reason, msg string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastTransitionTime: now}
	}
	tests := []struct {
		name     string
		pj       *trainingv1alpha1.PyJob
		job      *batchv1.Job
		want     trainingv1alpha1.PyJobPhase
		inMsg    string
		wantCond string
	}{
		{"no job yet", pj(nil), nil, trainingv1alpha1.PyJobPending, "creating", status.ReasonProgressing},
		{"scheduled, none ready", pj(nil), job(nil), trainingv1alpha1.PyJobPending, "waiting for 2 workers", status.ReasonProgressing},
		{"one ready", pj(nil), job(func(j *batchv1.Job) { j.Status.Ready = ptr.To(int32(1)); j.Status.Active = 2 }), trainingv1alpha1.PyJobRunning, "1/2 workers running", status.ReasonProgressing},
		{"one finished, the other still at work", pj(nil), job(func(j *batchv1.Job) { j.Status.Succeeded = 1; j.Status.Active = 1; j.Status.Ready = ptr.To(int32(0)) }), trainingv1alpha1.PyJobRunning, "0/2 workers running, 1 finished", status.ReasonProgressing},
		{"a running run whose worker restarts stays Running", pj(func(p *trainingv1alpha1.PyJob) { p.Status.Phase = trainingv1alpha1.PyJobRunning }),
			job(func(j *batchv1.Job) { j.Status.Active = 2; j.Status.Ready = ptr.To(int32(0)) }), trainingv1alpha1.PyJobRunning, "waiting for 2 workers", status.ReasonProgressing},
		{"retrying", pj(nil), job(func(j *batchv1.Job) { j.Status.Failed = 1 }), trainingv1alpha1.PyJobPending, "retrying after 1 failed", status.ReasonProgressing},
		{"complete", pj(nil), job(func(j *batchv1.Job) {
			j.Status.Succeeded = 2
			j.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobComplete, "", "")}
		}), trainingv1alpha1.PyJobSucceeded, "2/2 workers succeeded", status.ReasonSucceeded},
		{"failed", pj(nil), job(func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailed, "BackoffLimitExceeded", "Job has reached the specified backoff limit")}
		}), trainingv1alpha1.PyJobFailed, "BackoffLimitExceeded: Job has reached the specified backoff limit", "BackoffLimitExceeded"},
		{"deadline", pj(nil), job(func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailed, "DeadlineExceeded", "Job was active longer than specified deadline")}
		}), trainingv1alpha1.PyJobFailed, "DeadlineExceeded", "DeadlineExceeded"},
		{"suspended by user", pj(func(p *trainingv1alpha1.PyJob) { p.Spec.Suspend = ptr.To(true) }), job(func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(true) }), trainingv1alpha1.PyJobSuspended, "spec.suspend", status.ReasonSuspended},
		{"waiting in queue", pj(func(p *trainingv1alpha1.PyJob) { p.Spec.QueueName = "team-a" }), job(func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(true) }), trainingv1alpha1.PyJobQueued, "queue team-a", ReasonQueued},
		{"finished, job removed by TTL", pj(func(p *trainingv1alpha1.PyJob) {
			p.Status.Phase, p.Status.Message, p.Status.StartTime = trainingv1alpha1.PyJobSucceeded, "2/2 workers succeeded", &now
			p.Status.Conditions = []metav1.Condition{{Type: status.ReadyCondition, Status: metav1.ConditionTrue, Reason: status.ReasonSucceeded}}
		}), nil, trainingv1alpha1.PyJobSucceeded, "2/2 workers succeeded", status.ReasonSucceeded},
		{"job deleted mid-run", pj(func(p *trainingv1alpha1.PyJob) {
			p.Status.Phase, p.Status.StartTime, p.Status.JobName = trainingv1alpha1.PyJobRunning, &now, "x-job"
		}), nil, trainingv1alpha1.PyJobFailed, "was deleted before it finished", ReasonJobDeleted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := pyjobObservation{job: tc.job}
			p := computePyJobPhase(tc.pj, obs)
			if p.phase != tc.want || !strings.Contains(p.message, tc.inMsg) {
				t.Fatalf("phase %s %q, want %s containing %q", p.phase, p.message, tc.want, tc.inMsg)
			}
			applyPyJobStatus(tc.pj, obs, p)
			var ready *metav1.Condition
			for i := range tc.pj.Status.Conditions {
				if tc.pj.Status.Conditions[i].Type == status.ReadyCondition {
					ready = &tc.pj.Status.Conditions[i]
				}
			}
			if ready == nil || ready.Reason != tc.wantCond {
				t.Fatalf("Ready condition %+v, want reason %s", ready, tc.wantCond)
			}
			if (ready.Status == metav1.ConditionTrue) != (tc.want == trainingv1alpha1.PyJobSucceeded) {
				t.Errorf("Ready=%s in phase %s", ready.Status, tc.want)
			}
			if tc.want == trainingv1alpha1.PyJobFailed && tc.job != nil && tc.pj.Status.CompletionTime == nil {
				t.Error("a failed run has no completion time")
			}
		})
	}
}

// TestFailureTextPutsTheErrorFirst: a traceback's last line (the
// exception) comes first in a failed PyJob's status, the lines before it
// after, cut from their start to fit.
func TestFailureTextPutsTheErrorFirst(t *testing.T) {
	long := strings.Repeat("  File \"x.py\", line 1, in f\n", 100)
	got := failureText(long + "TimeoutError: could not reach ddp-job-0.ddp-job\n")
	if !strings.HasPrefix(got, "TimeoutError: could not reach ddp-job-0.ddp-job\n…") {
		t.Errorf("the error is not first: %q", got[:min(len(got), 80)])
	}
	if len(got) > maxFailureMessage+len("…") {
		t.Errorf("%d bytes, want at most %d", len(got), maxFailureMessage)
	}
	if got := failureText("one line"); got != "one line" {
		t.Errorf("one line: %q", got)
	}
	if got := failureText(strings.Repeat("é", maxFailureMessage)); !utf8.ValidString(got) || len(got) > maxFailureMessage+len("…") {
		t.Errorf("a long line is not cut to valid UTF-8 within the limit: %d bytes", len(got))
	}
}

// TestFailedRanks: every rank torchrun's summary lists as failed is named,
// by rank, with its exit code; a message without a summary names none.
func TestFailedRanks(t *testing.T) {
	summary := `torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
python3 FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-03_13:58:16
  host      : resume-job-0.resume-job.real-k8q89.svc.cluster.local
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 10)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-03_13:58:16
  host      : resume-job-0.resume-job.real-k8q89.svc.cluster.local
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 9)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================`
	want := "rank 0 (local rank 0) exited with code -15, rank 1 (local rank 1) exited with code 1"
	if got := failedRanks(summary); got != want {
		t.Errorf("failedRanks = %q, want %q", got, want)
	}
	if got := failedRanks("Traceback (most recent call last):\nValueError: rank must be set"); got != "" {
		t.Errorf("failedRanks of a plain traceback = %q", got)
	}
	if got := failureText(summary); !strings.HasPrefix(got, "traceback : To enable") {
		t.Errorf("failureText skips the closing rule: %q", got[:40])
	}
}

// TestDecideRestart: what becomes of a failed run, from the Job's Failed
// condition and the PyJob's failure policy.
func TestDecideRestart(t *testing.T) {
	pj := func(restarts, max int32, backoff *int32) *trainingv1alpha1.PyJob {
		p := &trainingv1alpha1.PyJob{}
		p.Spec.BackoffLimit = backoff
		if max >= 0 {
			p.Spec.FailurePolicy = &trainingv1alpha1.PyJobFailurePolicy{MaxRestarts: ptr.To(max)}
		}
		p.Status.Restarts = restarts
		return p
	}
	backoff := func(msg string) *batchv1.JobCondition {
		return &batchv1.JobCondition{Type: batchv1.JobFailed, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: msg}
	}
	policy := func(msg string) *batchv1.JobCondition {
		return &batchv1.JobCondition{Type: batchv1.JobFailed, Reason: batchv1.JobReasonPodFailurePolicy, Message: msg}
	}
	for _, tc := range []struct {
		name             string
		pj               *trainingv1alpha1.PyJob
		cond             *batchv1.JobCondition
		disrupted        string
		restart, counted bool
		reason, in       string
	}{
		{"a restart left", pj(0, 1, nil), backoff("Job has reached the specified backoff limit"), "", true, true, ReasonRestart, "restart 1 of 1: worker 1 exited"},
		{"restarts spent", pj(1, 1, nil), backoff("Job has reached the specified backoff limit"), "", false, false, ReasonMaxRestarts, "failed after 1 restarts (maxRestarts 1)"},
		{"backoffLimit is the older name", pj(1, -1, ptr.To[int32](2)), backoff("x"), "", true, true, ReasonRestart, "restart 2 of 2"},
		{"no restart by default", pj(0, -1, nil), backoff("x"), "", false, false, ReasonMaxRestarts, "maxRestarts 0"},
		{"disruption, not counted", pj(3, 3, nil), policy("Pod ns/p-1 has condition DisruptionTarget matching FailJob rule at index 0"), "worker 1 (pod p-1) was disrupted: EvictionByEvictionAPI: evicted", true, false, ReasonDisruption, "pod p-1) was disrupted: EvictionByEvictionAPI"},
		{"disruption, the pod gone", pj(0, 0, nil), policy("Pod ns/p-1 has condition DisruptionTarget matching FailJob rule at index 0"), "", true, false, ReasonDisruption, "Pod ns/p-1 has condition DisruptionTarget"},
		{"fail on exit code", pj(0, 5, nil), policy("Container trainer for pod ns/p-0 failed with exit code 42 matching FailJob rule at index 1"), "", false, false, ReasonFailOnExitCode, "failOnExitCodes"},
		{"deadline", pj(0, 5, nil), &batchv1.JobCondition{Type: batchv1.JobFailed, Reason: batchv1.JobReasonDeadlineExceeded, Message: "Job was active longer than specified deadline"}, "", false, false, "Failed", "DeadlineExceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideRestart(tc.pj, classifyFailure(tc.cond, tc.disrupted, "worker 1 exited with code 1"))
			if d.restart != tc.restart || d.counted != tc.counted || d.reason != tc.reason || !strings.Contains(d.message, tc.in) {
				t.Errorf("decision %+v, want restart %v counted %v reason %s, a message with %q", d, tc.restart, tc.counted, tc.reason, tc.in)
			}
		})
	}
}

// TestResolverLine: the last line quoting the C library's resolver error
// is found in a rank's log tail; a log without one gives none.
func TestResolverLine(t *testing.T) {
	log := "[W socket.cpp:601] [c10d] The IPv6 network addresses of (j-0.j, 29500) cannot be retrieved (gai error: -3 - Temporary failure in name resolution).\n" +
		"[W socket.cpp:601] [c10d] The IPv4 network addresses of (j-0.j, 29500) cannot be retrieved (gai error: -2 - Name or service not known).\n" +
		"TimeoutError: The client socket has timed out after 20s while trying to connect to (j-0.j, 29500)."
	if got := resolverLine(log); !strings.Contains(got, "gai error: -2 - Name or service not known") {
		t.Errorf("resolverLine = %q", got)
	}
	if got := resolverLine("TimeoutError: timed out"); got != "" {
		t.Errorf("resolverLine of a log without one = %q", got)
	}
}
