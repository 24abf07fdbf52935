// SPDX-License-Identifier: Apache-2.0

// Package children applies and compares the children trainops's
// reconcilers create: server-side apply of what internal/builder builds,
// the check that a child's name is trainops's to use (owns), drift of the
// fields trainops manages put back (drift, fields), pruning, the cache a
// manager holds them in, and the status a failed apply leaves. Every
// workload reconciler builds on it; it knows none of them.
package children

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/builder"
)

// ApplyResult says what applying a child did.
type ApplyResult int

const (
	Unchanged ApplyResult = iota
	Created
	Configured
)

// Applier applies children with server-side apply.
type Applier struct {
	client client.Client
	// reader reads live from the API server: the cache holds only
	// trainops's children, so a name it does not know may still be taken.
	reader client.Reader
	// TakeOver applies over objects trainops did not create (a
	// ClusterPolicy's takeOverExisting); never set otherwise.
	TakeOver bool
	// recorder and owner receive the DriftCorrected Event of a child
	// applied back (see drift); nil: no Event.
	recorder events.EventRecorder
	owner    runtime.Object
	// compared remembers the children found unchanged (nil: none).
	compared *Compared
}

// ReportingTo makes a record one Warning Event on owner for each child it
// applies back after someone changed it.
func (a Applier) ReportingTo(rec events.EventRecorder, owner runtime.Object) Applier {
	a.recorder, a.owner = rec, owner
	return a
}

// Applier applies the children of d's reconciler: with its client, and
// looking up names the cache does not know with its APIReader (nil: with
// the client).
func (d Deps) Applier() Applier {
	return Applier{client: d.Client, reader: d.Live(), compared: d.Compared}
}

// Answer says what apply returns of the object it writes.
type Answer bool

const (
	// MetadataAnswer: the API server answers with the object's metadata
	// only, which is all apply reads; apply returns nil.
	MetadataAnswer Answer = false
	// WholeAnswer: apply returns the whole object the API server answers
	// (nil when nothing was written), so a caller need not wait for the
	// cache to see what it just wrote.
	WholeAnswer Answer = true
)

// AnswerIf is WholeAnswer when whole holds.
func AnswerIf(whole bool) Answer { return Answer(whole) }

// DecodeAnswer decodes the whole answer apply returned into out; false when
// nothing was written or the answer does not decode.
func DecodeAnswer(answer *unstructured.Unstructured, out client.Object) bool {
	return answer != nil && runtime.DefaultUnstructuredConverter.FromUnstructured(answer.Object, out) == nil
}

// Apply makes the cluster match desired, writing only what differs. It
// reads the current object from the cache; when trainops last applied
// exactly this configuration and nobody changed it since (see drift), it
// writes nothing. A kind's row of childKinds says whether a new child is
// created or applied, and how an applied one is compared. want says what
// it returns of the object written.
func (a Applier) Apply(ctx context.Context, desired client.Object, want Answer) (ApplyResult, *unstructured.Unstructured, error) {
	whole := want == WholeAnswer
	u, err := builder.ToUnstructured(desired)
	if err != nil {
		return Unchanged, nil, err
	}
	hash, err := configHash(u)
	if err != nil {
		return Unchanged, nil, err
	}
	// A typed object is read from the informer cache; kinds without Go
	// types (the ServiceMonitor) cost a request, and so does a name the
	// cache does not know, which may still be taken by someone else's
	// object.
	key := types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}
	current := cachedLike(desired, u.GroupVersionKind())
	err = a.client.Get(ctx, key, current)
	if _, uncached := desired.(*unstructured.Unstructured); apierrors.IsNotFound(err) && !uncached {
		if kindOf(u.GroupVersionKind().GroupKind()).createOnly() {
			// A create fails when the name is taken: one request, where a
			// look-up and an apply would be two.
			res, obj, cerr := a.create(ctx, desired, hash, whole)
			if !apierrors.IsAlreadyExists(cerr) {
				return res, obj, cerr
			}
		}
		// Not one of trainops's children: ask the API server whether the
		// name is free, metadata only.
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(u.GroupVersionKind())
		if err = a.reader.Get(ctx, key, m); err == nil {
			current = m
		}
	}
	exists := err == nil
	var drifted []string
	switch {
	case exists:
		if err := owns(desired, current); err != nil && !a.TakeOver {
			return Unchanged, nil, err
		}
		if current.GetAnnotations()[builder.AnnotationAppliedHash] == hash && current.GetDeletionTimestamp() == nil {
			// What trainops applied last; has anyone changed it since?
			// Compared in memory, against the informer cache.
			if !driftChecked(current) || a.compared.unchanged(current, hash) {
				return Unchanged, nil, nil
			}
			fields, err := drift(withAnnotation(u, builder.AnnotationAppliedHash, hash), current)
			if errors.Is(err, errFieldsHashed) {
				// The cache keeps a hash of the fields: read them to name
				// what changed, if anything did.
				full := cachedLike(desired, u.GroupVersionKind())
				if err = a.reader.Get(ctx, key, full); err == nil {
					fields, err = drift(u, full)
				}
			}
			if err != nil {
				return Unchanged, nil, err
			}
			if len(fields) == 0 {
				a.compared.remember(current, hash)
				return Unchanged, nil, nil
			}
			drifted = fields
		}
	case apierrors.IsNotFound(err):
	default:
		return Unchanged, nil, fmt.Errorf("get %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	u = withAnnotation(u, builder.AnnotationAppliedHash, hash)
	if exists {
		// Written only to the object just read: were it deleted since (by
		// its owner's garbage collection, or a person) while the cache
		// still holds it, an apply would create it anew from a stale
		// read, and a Job would run again. With its UID in the body the
		// API server refuses instead.
		u.SetUID(current.GetUID())
	}
	var written metav1.Object = u
	if whole {
		err = a.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(builder.FieldManager), client.ForceOwnership)
	} else {
		written, err = a.applyMetadata(ctx, u)
	}
	if exists && replacedSinceRead(err) {
		return Unchanged, nil, &GoneError{Msg: fmt.Sprintf("%s %s was deleted or replaced since it was read: it is looked at again once the cache has seen it", u.GetKind(), objectKey(u))}
	}
	if err != nil {
		return Unchanged, nil, fmt.Errorf("apply %s %s: %w", u.GetKind(), objectKey(u), err)
	}
	// Just applied: as trainops wants it, until someone changes it.
	if obj, ok := written.(client.Object); ok && obj.GetUID() != "" && obj.GetResourceVersion() != "" {
		a.compared.remember(obj, hash)
	}
	if len(drifted) > 0 {
		a.driftCorrected(u, drifted)
	}
	if !whole {
		u = nil
	}
	if !exists {
		return Created, u, nil
	}
	return Configured, u, nil
}

// replacedSinceRead reports whether err is the API server's refusal of an
// apply naming the UID of an object that no longer exists (a conflict), or
// that another object of the same name has replaced (metadata.uid cannot
// change).
func replacedSinceRead(err error) bool {
	if apierrors.IsConflict(err) {
		return true
	}
	var st apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}

// withAnnotation is u with the annotation key set to value (u itself,
// changed).
func withAnnotation(u *unstructured.Unstructured, key, value string) *unstructured.Unstructured {
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[key] = value
	u.SetAnnotations(ann)
	return u
}

// driftCorrected records a child applied back: one Warning Event on the
// owner naming the child and the fields, and the metric.
func (a Applier) driftCorrected(u *unstructured.Unstructured, fields []string) {
	driftCorrected.WithLabelValues(u.GetKind()).Inc()
	if a.recorder != nil && a.owner != nil {
		// The child is the related object: the API server folds like
		// Events into a series, and those of two children are not alike.
		a.recorder.Eventf(a.owner, u, corev1.EventTypeWarning, ReasonDriftCorrected, "Apply", "%s", driftMessage(u.GetKind(), objectKey(u), fields))
	}
}

// create creates desired with the applied-hash annotation; with whole it
// returns the object the API server answered.
func (a Applier) create(ctx context.Context, desired client.Object, hash string, whole bool) (ApplyResult, *unstructured.Unstructured, error) {
	obj := desired.DeepCopyObject().(client.Object)
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[builder.AnnotationAppliedHash] = hash
	obj.SetAnnotations(ann)
	if err := a.client.Create(ctx, obj, client.FieldOwner(builder.FieldManager)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return Unchanged, nil, err
		}
		return Unchanged, nil, fmt.Errorf("create %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, objectKey(obj), err)
	}
	if !whole {
		return Created, nil, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return Created, nil, nil
	}
	return Created, &unstructured.Unstructured{Object: m}, nil
}

// emptyLike is a new, empty object of desired's type (and kind, when
// unstructured) to read the current state into.
func emptyLike(desired client.Object) client.Object {
	if u, ok := desired.(*unstructured.Unstructured); ok {
		out := &unstructured.Unstructured{}
		out.SetGroupVersionKind(u.GroupVersionKind())
		return out
	}
	return reflect.New(reflect.TypeOf(desired).Elem()).Interface().(client.Object)
}

// applyMetadata server-side applies u and returns the metadata the API
// server answers with, in protobuf.
func (a Applier) applyMetadata(ctx context.Context, u *unstructured.Unstructured) (*metav1.PartialObjectMetadata, error) {
	body, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(u.GroupVersionKind())
	meta.SetNamespace(u.GetNamespace())
	meta.SetName(u.GetName())
	return meta, a.client.Patch(ctx, meta, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(builder.FieldManager), client.ForceOwnership)
}

func configHash(u *unstructured.Unstructured) (string, error) {
	b, err := json.Marshal(u.Object) // map keys sorted: stable
	if err != nil {
		return "", err
	}
	h := fnv.New64a()
	_, _ = h.Write(b)
	return fmt.Sprintf("%016x", h.Sum64()), nil
}

func objectKey(o client.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// ChangeLog gathers what one reconcile created and updated, so that it
// emits one Event for each rather than one per child: the API server folds
// like Events into a series, at the cost of a write per repeat.
type ChangeLog struct{ created, updated []string }

// Add notes what applying o did.
func (c *ChangeLog) Add(res ApplyResult, o client.Object) {
	name := o.GetObjectKind().GroupVersionKind().Kind + " " + o.GetName()
	switch res {
	case Created:
		c.created = append(c.created, name)
	case Configured:
		c.updated = append(c.updated, name)
	}
}

// Record emits the Events: "created Job a, Service a", "updated ...".
func (c *ChangeLog) Record(r events.EventRecorder, obj runtime.Object) {
	if len(c.created) > 0 {
		r.Eventf(obj, nil, corev1.EventTypeNormal, "Created", "Create", "created %s", strings.Join(c.created, ", "))
	}
	if len(c.updated) > 0 {
		r.Eventf(obj, nil, corev1.EventTypeNormal, "Updated", "Update", "updated %s", strings.Join(c.updated, ", "))
	}
}
