// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

// TestRerunRunsAgain: a new trainops.dev/rerun value on a Succeeded PyJob
// runs it again under the same name, as run 2 with a new Job; the same
// value again does nothing.
func TestRerunRunsAgain(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	pj := &trainingv1alpha1.PyJob{}
	testenv.LoadCase(t, testenv.Seed("bert-training"), pj)
	pj.Namespace = ns
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	pj = waitPhase(t, ns, pj.Name, trainingv1alpha1.PyJobSucceeded)
	if pj.Status.Runs != 1 {
		t.Errorf("runs %d after the first run, want 1", pj.Status.Runs)
	}
	firstJob := jobOf(t, pj)
	rerun := func(value string) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := getPyJob(t, ns, pj.Name)
			cur.Annotations = map[string]string{trainingv1alpha1.RerunAnnotation: value}
			return k8s.Update(ctx, cur)
		}); err != nil {
			t.Fatal(err)
		}
	}
	rerun("2026-12-03")
	testenv.Eventually(t, 90*time.Second, func() error {
		pj = getPyJob(t, ns, pj.Name)
		if pj.Status.Runs != 2 || pj.Status.Phase != trainingv1alpha1.PyJobSucceeded {
			return fmt.Errorf("run %d phase %s: %s", pj.Status.Runs, pj.Status.Phase, pj.Status.Message)
		}
		return nil
	})
	job := jobOf(t, pj)
	if job.UID == firstJob.UID || job.Annotations[builder.AttemptAnnotation] != "2.0" {
		t.Errorf("Job %s (attempt %s) after the rerun, want a new one of attempt 2.0", job.UID, job.Annotations[builder.AttemptAnnotation])
	}
	if pj.Status.StartTime == nil || pj.Status.StartTime.Before(&firstJob.CreationTimestamp) {
		t.Errorf("start time %v is not the second run's", pj.Status.StartTime)
	}
	if _, ok := testenv.EventReasons(t, k8s, ns, pj.Name)[ReasonRerun]; !ok {
		t.Error("no Rerun Event")
	}
	// The same value again is no new request: reconciled by hand, from a
	// cache that holds the PyJob as last written, it starts no run.
	rerun("2026-12-03")
	testenv.CacheCaughtUp(t, mgr.GetClient(), k8s, pj)
	r := &Reconciler{Deps: children.Deps{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("test"), Config: testCfg}}
	reconciled := 0
	testenv.AfterProof(t, 30*time.Second, func() error {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pj)}); err != nil {
			return err
		}
		if reconciled++; reconciled < 2 {
			return fmt.Errorf("reconciled %d times, want 2", reconciled)
		}
		return nil
	}, func() error {
		if again, got := jobOf(t, pj), getPyJob(t, ns, pj.Name); again.UID != job.UID || got.Status.Runs != 2 {
			return fmt.Errorf("the same rerun value ran the PyJob again: Job %s (was %s), runs %d", again.UID, job.UID, got.Status.Runs)
		}
		return nil
	})
}

// TestBadTemplateStallsAndCreatesNothing: a PyJob whose stored template
// trainops cannot read (the API server keeps it as given) is Stalled with
// the field named, and no Job is created.
func TestBadTemplateStallsAndCreatesNothing(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	pj := &trainingv1alpha1.PyJob{}
	testenv.LoadCase(t, testenv.Seed("bert-training"), pj)
	pj.Namespace = ns
	pj.Spec.Template = &runtime.RawExtension{Raw: []byte(`{"spec":{"hostNetwrk":true,"containers":[{"name":"proxy"}]}}`)}
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		pj = getPyJob(t, ns, pj.Name)
		if !conditions.IsStalled(pj) || !strings.Contains(conditions.GetMessage(pj, status.StalledCondition), `spec.template: unknown field "spec.hostNetwrk"`) {
			return fmt.Errorf("conditions %+v", pj.Status.Conditions)
		}
		return nil
	})
	err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.JobName(pj)}, &batchv1.Job{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a Job of the bad template: %v", err)
	}
}

// jobOf is pj's Job as the API server has it.
func jobOf(t *testing.T, pj *trainingv1alpha1.PyJob) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: pj.Namespace, Name: builder.JobName(pj)}, job); err != nil {
		t.Fatal(err)
	}
	return job
}
