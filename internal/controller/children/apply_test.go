// SPDX-License-Identifier: Apache-2.0

package children

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

// staleReads answers reads with an object as it was read earlier, as an
// informer cache that has not seen a deletion yet does; its writes reach
// the API server.
type staleReads struct {
	client.Client
	seen *batchv1.Job
}

func (s staleReads) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return fmt.Errorf("staleReads holds a Job, not %T", obj)
	}
	s.seen.DeepCopyInto(job)
	return nil
}

// TestApplyNeverRecreatesAChildGoneSinceItWasRead: a child the cache still
// holds, but which was deleted since (its owner's garbage collection
// racing the owner's last reconcile), is not created anew by the apply
// that follows the stale read, nor is a new object of the same name
// written over; the apply says so with a GoneError, which leaves the
// owner's status alone. A fresh read applies as usual.
func TestApplyNeverRecreatesAChildGoneSinceItWasRead(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}
	if err := k8s.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	desired := func(label string) *batchv1.Job {
		j := &batchv1.Job{
			TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "train", Labels: map[string]string{builder.LabelManagedBy: builder.ManagedBy, "round": label}},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "worker", Image: "registry.invalid/train:1"}},
			}}},
		}
		j.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}
		return j
	}
	fresh := Applier{client: k8s, reader: k8s}
	if res, _, err := fresh.Apply(ctx, desired("1"), MetadataAnswer); err != nil || res != Created {
		t.Fatalf("first apply: %v, %v", res, err)
	}
	seen := &batchv1.Job{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "train"}, seen); err != nil {
		t.Fatal(err)
	}
	stale := Applier{client: staleReads{Client: k8s, seen: seen}, reader: k8s}
	assertGone := func(what string) {
		t.Helper()
		_, _, err := stale.Apply(ctx, desired("2"), MetadataAnswer)
		var gone *GoneError
		if !errors.As(err, &gone) {
			t.Fatalf("%s: the apply after a stale read answered %v, want a GoneError", what, err)
		}
		pj := &trainingv1alpha1.PyJob{}
		if res, ferr := Failed(nil, pj, err, time.Minute); ferr != nil || res.RequeueAfter != time.Minute || len(pj.Status.Conditions) > 0 {
			t.Fatalf("%s: Failed(GoneError) = %v, %v, conditions %v; want a plain retry", what, res, ferr, pj.Status.Conditions)
		}
	}

	// Deleted since the read: nothing is created.
	if err := k8s.Delete(ctx, seen, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "train"}, &batchv1.Job{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("the Job is still there (%v)", err)
	})
	assertGone("deleted")
	var jobs batchv1.JobList
	if err := k8s.List(ctx, &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 0 {
		t.Fatalf("the apply after a stale read created Job %s (UID %s)", jobs.Items[0].Name, jobs.Items[0].UID)
	}

	// Replaced since the read by another object of the same name: it is
	// left as it is.
	other := desired("other")
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	assertGone("replaced")
	now := &batchv1.Job{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "train"}, now); err != nil {
		t.Fatal(err)
	}
	if now.UID != other.UID || now.ResourceVersion != other.ResourceVersion || now.Labels["round"] != "other" {
		t.Fatalf("the replacing Job was written: UID %s (was %s), resourceVersion %s (was %s), round %q",
			now.UID, other.UID, now.ResourceVersion, other.ResourceVersion, now.Labels["round"])
	}

	// A fresh read applies to the object it read.
	if res, _, err := fresh.Apply(ctx, desired("3"), MetadataAnswer); err != nil || res != Configured {
		t.Fatalf("apply after a fresh read: %v, %v", res, err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "train"}, now); err != nil {
		t.Fatal(err)
	}
	if now.UID != other.UID || now.Labels["round"] != "3" {
		t.Fatalf("after a fresh read: UID %s (want %s), round %q (want 3)", now.UID, other.UID, now.Labels["round"])
	}
}
