// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/pyjob"
)

// plainApply is the floor: server-side apply of every object, namespaces
// first, from 16 goroutines.
func plainApply(ctx context.Context, c client.Client, objs []benchrepo.Object) error {
	var first, rest []client.Object
	for _, o := range objs {
		if o.Kind == "Namespace" {
			first = append(first, o.U)
		} else {
			rest = append(rest, o.U)
		}
	}
	if err := applyTyped(ctx, c, first); err != nil {
		return err
	}
	return applyTyped(ctx, c, rest)
}

func applyTyped(ctx context.Context, c client.Client, objs []client.Object) error {
	return parallel(len(objs), func(i int) error { return applyOne(ctx, c, objs[i]) })
}

// createTyped creates objs, as trainops creates a PyJob's Job: one POST
// each, the field manager "floor".
func createTyped(ctx context.Context, c client.Client, objs []client.Object) error {
	return parallel(len(objs), func(i int) error { return c.Create(ctx, objs[i], client.FieldOwner("floor")) })
}

// applyOne applies o with server-side apply as the field manager "floor".
func applyOne(ctx context.Context, c client.Client, o client.Object) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "creationTimestamp")
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("floor"), client.ForceOwnership)
}

// otherWrites makes, for each PyJob, the writes besides its Job that
// trainops makes: the headless Service (server-side apply), the first
// status (a merge patch of the status subresource) and one Event.
func (b *bench) otherWrites(ctx context.Context, pjs []*trainingv1alpha1.PyJob) error {
	return parallel(len(pjs), func(i int) error {
		svc := serviceOf(pjs[i])
		if err := applyOne(ctx, b.c, svc); err != nil {
			return err
		}
		cur := &trainingv1alpha1.PyJob{}
		if err := b.c.Get(ctx, client.ObjectKeyFromObject(pjs[i]), cur); err != nil {
			return err
		}
		if err := firstStatus(ctx, b.c, cur); err != nil {
			return err
		}
		return createdEvent(ctx, b.cs, cur, "created Service "+svc.Name+", Job "+builder.JobName(cur))
	})
}

// jobOf is the Job a plain client creates for pj: trainops's, without the
// owner.
func jobOf(pj *trainingv1alpha1.PyJob) (*batchv1.Job, error) {
	job, err := builder.JobFor(pj)
	if err != nil {
		return nil, err
	}
	job.OwnerReferences = nil
	return job, nil
}

// serviceOf is the headless Service a plain client creates for pj.
func serviceOf(pj *trainingv1alpha1.PyJob) *corev1.Service {
	svc := builder.ServiceFor(pj)
	svc.OwnerReferences = nil
	return svc
}

// firstStatus writes the status trainops gives a new PyJob (cur, as it is
// in the cluster) with a merge patch of the status subresource.
func firstStatus(ctx context.Context, c client.Client, cur *trainingv1alpha1.PyJob) error {
	next := cur.DeepCopy()
	job, err := builder.JobFor(cur)
	if err != nil {
		return err
	}
	pyjob.SetPyJobStatus(next, job)
	return c.Status().Patch(ctx, next, client.MergeFrom(cur), client.FieldOwner("floor"))
}

// createdEvent records the Event trainops records for a new PyJob.
func createdEvent(ctx context.Context, cs kubernetes.Interface, pj *trainingv1alpha1.PyJob, note string) error {
	_, err := cs.EventsV1().Events(pj.Namespace).Create(ctx, &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pj.Name, time.Now().UnixNano())},
		EventTime:           metav1.NowMicro(),
		ReportingController: "floor", ReportingInstance: "floor",
		Action: "Create", Reason: "Created", Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{APIVersion: trainingv1alpha1.GroupVersion.String(), Kind: "PyJob", Namespace: pj.Namespace, Name: pj.Name, UID: pj.UID},
		Note:      note,
	}, metav1.CreateOptions{})
	return err
}

// parallel runs fn(0..n-1) from 16 goroutines and returns the first error.
func parallel(n int, fn func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error { return fn(i) })
	}
	return g.Wait()
}
