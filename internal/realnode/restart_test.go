// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/pyjob"
	"github.com/trainops/trainops/internal/testenv"
)

// waitFor waits until pj reaches phase, failing at once on another final
// phase, and returns it as it then is.
func waitFor(t *testing.T, pj *trainingv1alpha1.PyJob, phase trainingv1alpha1.PyJobPhase, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	testenv.Eventually(t, within, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pj), pj); err != nil {
			return err
		}
		done := pj.Status.Phase == trainingv1alpha1.PyJobSucceeded || pj.Status.Phase == trainingv1alpha1.PyJobFailed
		if done && pj.Status.Phase != phase {
			t.Fatalf("the PyJob is %s, want %s: %s\n%s", pj.Status.Phase, phase, pj.Status.Message, podLogs(t, pj.Namespace, builder.TrainerContainer))
		}
		if pj.Status.Phase != phase {
			return fmt.Errorf("phase %q: %s", pj.Status.Phase, pj.Status.Message)
		}
		return nil
	})
}

// pythonJob is a one-worker PyJob named name in ns that runs the Python
// script with the training image on the real node.
func pythonJob(ns, name, script string) *trainingv1alpha1.PyJob {
	return &trainingv1alpha1.PyJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: trainingv1alpha1.PyJobSpec{
			Image:        images.Training,
			Command:      []string{"python3", "-c", script},
			NodeSelector: map[string]string{"kubernetes.io/hostname": testenv.RealNodeName},
		},
	}
}

// events are the notes of ns's Events about the PyJob name with reason.
func events(t *testing.T, ns, name, reason string) []string {
	t.Helper()
	var evs corev1.EventList
	if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == trainingv1alpha1.PyJobKind && e.InvolvedObject.Name == name && e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

// TestFailedRankRestartsTheRunAndResumes: 2 workers × 2 processes train
// with torchrun, checkpointing every step; in the first attempt rank 1
// exits 1 at step 3. Every rank stops, all 4 start again as attempt 1 in
// new pods, resume from the step-3 checkpoint and finish: Succeeded with
// one restart, and the Event names rank 1 and exit code 1. Then a rerun
// (trainops.dev/rerun) of the Succeeded PyJob runs it again, resuming from
// its last checkpoint.
func TestFailedRankRestartsTheRunAndResumes(t *testing.T) {
	testenv.RequireRealNode(t, env)
	ctx := context.Background()
	ns := newNamespace(t)
	t.Cleanup(func() { release(t, ns) })
	outputVolume(t, ns, "output")
	script, err := TrainScript()
	if err != nil {
		t.Fatal(err)
	}
	pj := DistributedPyJob(ns, "resume", images.Training, script, "output")
	pj.Spec.Env = []corev1.EnvVar{{Name: "FAIL_RANK", Value: "1"}, {Name: "FAIL_STEP", Value: "3"}, {Name: "STEPS", Value: "8"}}
	pj.Spec.FailurePolicy = &trainingv1alpha1.PyJobFailurePolicy{MaxRestarts: ptr.To[int32](1)}
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	// The first attempt's pods, to prove the second ran in new ones.
	var first []string
	testenv.Eventually(t, 2*time.Minute, func() error {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{builder.LabelPyJob: pj.Name}); err != nil {
			return err
		}
		first = first[:0]
		for _, p := range pods.Items {
			first = append(first, string(p.UID))
		}
		if len(first) < 2 {
			return fmt.Errorf("%d pods of the first attempt", len(first))
		}
		return nil
	})
	waitFor(t, pj, trainingv1alpha1.PyJobSucceeded, 4*time.Minute)
	if pj.Status.Restarts != 1 || pj.Status.Attempt != 1 || pj.Status.Runs != 1 {
		t.Errorf("restarts %d attempt %d runs %d, want 1, 1, 1", pj.Status.Restarts, pj.Status.Attempt, pj.Status.Runs)
	}
	notes := events(t, ns, pj.Name, pyjob.ReasonRestart)
	if len(notes) != 1 || !strings.Contains(notes[0], "rank 1 (local rank 1) exited with code 1") || !strings.Contains(notes[0], "restart 1 of 1") {
		t.Errorf("%s Events %q: want one naming rank 1 and exit code 1", pyjob.ReasonRestart, notes)
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{builder.LabelPyJob: pj.Name}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, uid := range first {
			if string(p.UID) == uid {
				t.Errorf("pod %s of the first attempt is still there", p.Name)
			}
		}
	}
	logs := podLogs(t, ns, builder.TrainerContainer)
	for r := range 4 {
		if want := fmt.Sprintf("rank=%d attempt=1 resumed from the checkpoint of step 3", r); !strings.Contains(logs, want) {
			t.Errorf("the logs do not say %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "step=2 loss") {
		t.Errorf("attempt 1 trained step 2 again:\n%s", logs)
	}

	// Rerun the Succeeded PyJob: a second run, from the last checkpoint.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pj), pj); err != nil {
			return err
		}
		pj.Annotations = map[string]string{trainingv1alpha1.RerunAnnotation: "again"}
		return k8s.Update(ctx, pj)
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 4*time.Minute, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pj), pj); err != nil {
			return err
		}
		if pj.Status.Runs != 2 || pj.Status.Phase != trainingv1alpha1.PyJobSucceeded {
			return fmt.Errorf("run %d, phase %q: %s", pj.Status.Runs, pj.Status.Phase, pj.Status.Message)
		}
		return nil
	})
	if pj.Status.Restarts != 0 || pj.Status.Attempt != 0 || pj.Status.Rerun != "again" {
		t.Errorf("the rerun: restarts %d attempt %d rerun %q, want 0, 0, again", pj.Status.Restarts, pj.Status.Attempt, pj.Status.Rerun)
	}
	if logs := podLogs(t, ns, builder.TrainerContainer); !strings.Contains(logs, "rank=0 attempt=0 resumed from the checkpoint of step 8") {
		t.Errorf("the rerun did not resume from the last checkpoint:\n%s", logs)
	}
}

// TestRunFailsWithoutRestart: an exit code in failOnExitCodes fails the run
// at once; any other failure restarts it until maxRestarts are spent, and
// then fails it naming the last cause.
func TestRunFailsWithoutRestart(t *testing.T) {
	testenv.RequireRealNode(t, env)
	for _, tc := range []struct {
		name            string
		code            int
		policy          trainingv1alpha1.PyJobFailurePolicy
		restarts        int32
		reason, message string
	}{
		{"fail on exit code", 42, trainingv1alpha1.PyJobFailurePolicy{MaxRestarts: ptr.To[int32](3), FailOnExitCodes: []int32{42}}, 0,
			pyjob.ReasonFailOnExitCode, "the exit code is in failurePolicy.failOnExitCodes"},
		{"restarts spent", 1, trainingv1alpha1.PyJobFailurePolicy{MaxRestarts: ptr.To[int32](1)}, 1,
			pyjob.ReasonMaxRestarts, "failed after 1 restarts (maxRestarts 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ns := newNamespace(t)
			t.Cleanup(func() { release(t, ns) })
			pj := pythonJob(ns, "exits", fmt.Sprintf(
				"import os, sys; print('attempt', os.environ['TRAINOPS_RESTART_ATTEMPT'], 'gives up', file=sys.stderr); sys.exit(%d)", tc.code))
			pj.Spec.FailurePolicy = &tc.policy
			if err := k8s.Create(ctx, pj); err != nil {
				t.Fatal(err)
			}
			waitFor(t, pj, trainingv1alpha1.PyJobFailed, 2*time.Minute)
			if pj.Status.Restarts != tc.restarts {
				t.Errorf("restarts %d, want %d", pj.Status.Restarts, tc.restarts)
			}
			last := fmt.Sprintf("attempt %d gives up", tc.restarts)
			for _, want := range []string{tc.message, fmt.Sprintf("exited with code %d", tc.code), last} {
				if !strings.Contains(pj.Status.Message, want) {
					t.Errorf("message %q lacks %q", pj.Status.Message, want)
				}
			}
			if r := conditions.GetReason(pj, "Stalled"); r != tc.reason {
				t.Errorf("Stalled reason %q, want %q", r, tc.reason)
			}
		})
	}
}

// TestEvictionRestartsWithoutCounting: a worker evicted through the
// Eviction API restarts the whole run as a new attempt; the restart is not
// counted against maxRestarts (0 here), and the run then succeeds.
func TestEvictionRestartsWithoutCounting(t *testing.T) {
	testenv.RequireRealNode(t, env)
	ctx := context.Background()
	ns := newNamespace(t)
	t.Cleanup(func() { release(t, ns) })
	// The first attempt waits to be evicted; the next finishes.
	pj := pythonJob(ns, "evicted", "import os, time; time.sleep(600 if os.environ['TRAINOPS_RESTART_ATTEMPT'] == '0' else 0)")
	pj.Spec.Workers = 2
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	var victim corev1.Pod
	testenv.Eventually(t, 2*time.Minute, func() error {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{builder.LabelPyJob: pj.Name}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Annotations["batch.kubernetes.io/job-completion-index"] == "1" && p.Status.Phase == corev1.PodRunning {
				victim = p
				return nil
			}
		}
		return fmt.Errorf("worker 1 is not running yet")
	})
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: ns}}
	if err := k8s.SubResource("eviction").Create(ctx, &victim, eviction); err != nil {
		t.Fatal(err)
	}
	waitFor(t, pj, trainingv1alpha1.PyJobSucceeded, 3*time.Minute)
	if pj.Status.Restarts != 0 || pj.Status.Attempt != 1 {
		t.Errorf("restarts %d attempt %d, want 0 (not counted) and 1", pj.Status.Restarts, pj.Status.Attempt)
	}
	notes := events(t, ns, pj.Name, pyjob.ReasonDisruption)
	if len(notes) != 1 || !strings.Contains(notes[0], victim.Name) || !strings.Contains(notes[0], "not counted") {
		t.Errorf("%s Events %q: want one naming pod %s", pyjob.ReasonDisruption, notes, victim.Name)
	}
}
