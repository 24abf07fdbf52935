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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/ctrltest"
)

// TestOutdatedJobIsNotFought: a PyJob's Job built from an earlier
// configuration (another image in its pod template, another applied hash),
// as after an upgrade of trainops, cannot be changed in place. The PyJob
// says so in its JobUpToDate condition, does not stall, and the Job runs
// as created.
func TestOutdatedJobIsNotFought(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	ctx := context.Background()
	pj := &trainingv1alpha1.PyJob{}
	testenv.LoadCase(t, testenv.Seed("distributed-training"), pj)
	pj.Namespace, pj.Name = ns, "outdated"
	// Only this test reconciles it.
	pj.Labels = map[string]string{ctrltest.IsolatedLabel: "true"}
	pj.Spec.Suspend = ptr.To(true)
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	old := testenv.PyJobChildren(t, pj).Job
	old.Spec.Template.Spec.Containers[0].Image = "registry.example.com/trainer:old"
	old.Annotations = map[string]string{builder.AnnotationAppliedHash: "0000000000000000"}
	if err := k8s.Create(ctx, old, client.FieldOwner(builder.FieldManager)); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Deps: children.Deps{Client: k8s, Recorder: mgr.GetEventRecorder("test"), Config: testCfg}}
	// The proof that the reconcile saw the outdated Job is its
	// condition; then the Job is as it was.
	testenv.AfterProof(t, 30*time.Second, func() error {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pj)}); err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		got := getPyJob(t, ns, pj.Name)
		c := conditions.Get(got, JobUpToDateCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonImmutable || !strings.Contains(c.Message, old.Name) || !strings.Contains(c.Message, "new name") {
			return fmt.Errorf("JobUpToDate %+v, want False/Immutable naming the Job and what to do", c)
		}
		if conditions.IsStalled(got) || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("stalled %v, observedGeneration %d of %d: an outdated Job is no failure", conditions.IsStalled(got), got.Status.ObservedGeneration, got.Generation)
		}
		return nil
	}, func() error {
		job := &batchv1.Job{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(old), job); err != nil {
			return err
		}
		if img := job.Spec.Template.Spec.Containers[0].Image; img != "registry.example.com/trainer:old" || job.UID != old.UID {
			return fmt.Errorf("the Job was replaced or changed: image %s", img)
		}
		return nil
	})
}
