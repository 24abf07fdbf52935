// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/ctrltest"
	"github.com/trainops/trainops/internal/textsafe"
)

// hostileMessage is a worker's termination message as a hostile team
// writes it: a clipboard write (OSC 52), a link (OSC 8), a screen clear
// and a forged torchrun summary of 1,024 failed ranks.
func hostileMessage() string {
	var b strings.Builder
	b.WriteString("\x1b]52;c;cm0gLXJmIH4=\x07\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\x1b[2J\x1b[H\n")
	for r := range 1024 {
		fmt.Fprintf(&b, "[%d]:\n  rank      : %d (local_rank: 0)\n  exitcode  : 1\n", r, r)
	}
	b.WriteString("RuntimeError: \x1b[31mboom\x1b[0m")
	return b.String()
}

// TestTeamTextIsEscapedAndBounded: twelve failed workers whose termination
// messages hold escape sequences and forged summaries of 1,024 ranks: the
// PyJob's status message, conditions and Events hold no ESC byte, and each
// is within textsafe.MessageBytes.
func TestTeamTextIsEscapedAndBounded(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	pj := &trainingv1alpha1.PyJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hostile", Labels: map[string]string{ctrltest.IsolatedLabel: "true"}},
		Spec: trainingv1alpha1.PyJobSpec{Image: "registry.trainops.test/trainer:ok", Command: []string{"python"}, Workers: 12,
			FailurePolicy: &trainingv1alpha1.PyJobFailurePolicy{MaxRestarts: ptr.To[int32](3)}}}
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: builder.JobName(pj)}}
	msg := hostileMessage()
	for i := range 12 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("w-%d", i), Labels: map[string]string{batchv1.JobNameLabel: job.Name},
			Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: fmt.Sprint(i)}},
			// A node no kubelet serves: nothing but this test writes the status.
			Spec: corev1.PodSpec{NodeName: "nowhere", Containers: []corev1.Container{{Name: builder.TrainerContainer, Image: "x"}}}}
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: builder.TrainerContainer, Image: "x", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: msg, FinishedAt: metav1.NewTime(time.Unix(1e9+int64(i), 0))}}}}
		if err := k8s.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	r := &Reconciler{Deps: children.Deps{Client: k8s, APIReader: k8s, Recorder: suite.Events.For(gpuv1alpha1.EventReporter), Config: testCfg}}
	disrupted, exited := r.workerFailure(ctx, job)
	if !strings.Contains(exited, `RuntimeError: \x1b[31mboom`) {
		t.Errorf("the worker's message is not quoted, escaped: %.200q", exited)
	}
	f := classifyFailure(&batchv1.JobCondition{Type: batchv1.JobFailed, Reason: batchv1.JobReasonFailedIndexes}, disrupted, exited)
	d := decideRestart(pj, f)
	r.beginRestart(pj, d)
	texts := map[string]string{"status.message": pj.Status.Message}
	for _, c := range pj.Status.Conditions {
		texts["condition "+c.Type] = c.Message
	}
	var events eventsv1.EventList
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := k8s.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(events.Items) == 0 {
			return fmt.Errorf("no Event yet")
		}
		return nil
	})
	for _, e := range events.Items {
		texts["Event "+e.Reason] = e.Note
	}
	for where, s := range texts {
		if strings.ContainsRune(s, 0x1b) || strings.ContainsRune(s, 0x07) {
			t.Errorf("%s holds a control character: %.200q", where, s)
		}
		if len(s) > textsafe.MessageBytes {
			t.Errorf("%s is %d bytes, over %d", where, len(s), textsafe.MessageBytes)
		}
	}
	if !strings.Contains(pj.Status.Message, "more") {
		t.Errorf("the status does not say ranks were left out: %.300q", pj.Status.Message)
	}
}
