// SPDX-License-Identifier: Apache-2.0

package status

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/builder"
)

// Writer writes objects' status.
type Writer struct {
	Client client.Client
	// Shared, when set, says the object's conditions have other writers
	// (a ClusterPolicy's: its reconciler, remediation and the driver
	// upgrade), and reads the object live. A write then goes onto the list
	// as the API server has it, under its resourceVersion: the conditions
	// this writer owns are written as it has them, the others only where
	// it changed them, so a writer working from a stale copy never puts
	// back another's old condition. Nil: every field written has one
	// writer, and a write needs no read and no lock.
	Shared client.Reader
	// Owns says which condition types this writer owns, with Shared (nil:
	// none but those it changes).
	Owns func(conditionType string) bool
}

// WithStatus runs reconcile, then writes obj's status in one request, as
// Writer{Client: c}.Around does.
func WithStatus(ctx context.Context, c client.Client, obj client.Object, reconcile func() (ctrl.Result, error), done func()) (ctrl.Result, error) {
	return Writer{Client: c}.Around(ctx, obj, func(func(context.Context) error) (ctrl.Result, error) { return reconcile() }, done)
}

// WithStatusCheckpoints is WithStatus whose reconcile may write obj's
// status as it stands, mid-way, by calling checkpoint: the final write
// then sends what changed since.
func WithStatusCheckpoints(ctx context.Context, c client.Client, obj client.Object, reconcile func(checkpoint func(context.Context) error) (ctrl.Result, error), done func()) (ctrl.Result, error) {
	return Writer{Client: c}.Around(ctx, obj, reconcile, done)
}

// Around runs reconcile, then writes obj's status: the observedGeneration
// when the generation settled (see Settled), and what the reconcile
// changed (nothing when nothing did). After a write without error, and a
// reconcile without one, done runs: it records the transitions the
// reconcile made. reconcile may write the status mid-way by calling
// checkpoint.
func (w Writer) Around(ctx context.Context, obj client.Object, reconcile func(checkpoint func(context.Context) error) (ctrl.Result, error), done func()) (res ctrl.Result, retErr error) {
	p := w.patcher(obj)
	defer func() {
		if g, ok := obj.(conditions.Getter); ok && Settled(g, retErr) {
			Observe(obj)
		}
		if err := p.patch(ctx, obj); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("patch status: %w", err))
		}
		if retErr == nil && done != nil {
			done()
		}
	}()
	return reconcile(func(ctx context.Context) error { return p.patch(ctx, obj) })
}

// Change applies change to obj and writes what it changed, as Around
// does: for a writer that sets one condition of an object it does not
// reconcile (remediation, the driver upgrade on a ClusterPolicy).
func (w Writer) Change(ctx context.Context, obj client.Object, change func()) error {
	p := w.patcher(obj)
	change()
	return p.patch(ctx, obj)
}

func (w Writer) patcher(obj client.Object) *patcher {
	return &patcher{Writer: w, before: obj.DeepCopyObject().(client.Object)}
}

// patcher writes an object's status in one request: a JSON merge patch of
// the fields the reconcile changed, or nothing when it changed nothing.
// Each field but a shared conditions list has one writer, the object's
// own reconcile, so the patch carries no optimistic lock: a lock against a
// cached resourceVersion one write behind would only turn into conflicts
// (see docs/design.md).
type patcher struct {
	Writer
	before client.Object
}

// patch writes obj's status when it differs from the one last written
// (or read); what it wrote is the base of the next.
func (p *patcher) patch(ctx context.Context, obj client.Object) error {
	var err error
	if p.Shared != nil {
		err = p.patchShared(ctx, obj)
	} else {
		var data []byte
		if data, err = client.MergeFrom(p.before).Data(obj); err != nil {
			return err
		}
		if string(data) == "{}" {
			return nil
		}
		err = p.Client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, data), client.FieldOwner(builder.FieldManager))
	}
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile
	}
	if err == nil {
		p.before = obj.DeepCopyObject().(client.Object)
	}
	return err
}

// patchShared writes obj's status onto the live object: its conditions
// merged with the live ones (see merge), under the live resourceVersion;
// nothing when the live status is that already. On a conflict it reads
// again. It compares with the live object, not with what this writer last
// saw, so a write its own cache has not caught up with is no base for it.
func (p *patcher) patchShared(ctx context.Context, obj client.Object) error {
	before, after := conditionsOf(p.before), conditionsOf(obj)
	return retry.RetryOnConflict(sharedBackoff, func() error {
		live := obj.DeepCopyObject().(client.Object)
		if err := p.Shared.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
			return err
		}
		merged := merge(conditionsOf(live), before, after, p.Owns)
		want := obj.DeepCopyObject().(client.Object)
		setConditions(want, merged)
		target, err := withStatusOf(live, want)
		if err != nil {
			return err
		}
		data, err := client.MergeFrom(live).Data(target)
		if err != nil {
			return err
		}
		if string(data) != "{}" {
			if err := p.Client.Status().Patch(ctx, target, client.MergeFromWithOptions(live, client.MergeFromWithOptimisticLock{}), client.FieldOwner(builder.FieldManager)); err != nil {
				return err
			}
		}
		setConditions(obj, merged)
		obj.SetResourceVersion(target.GetResourceVersion())
		return nil
	})
}

// withStatusOf is live with want's status.
func withStatusOf(live, want client.Object) (client.Object, error) {
	l, err := runtime.DefaultUnstructuredConverter.ToUnstructured(live)
	if err != nil {
		return nil, err
	}
	w, err := runtime.DefaultUnstructuredConverter.ToUnstructured(want)
	if err != nil {
		return nil, err
	}
	if st, ok := w["status"]; ok {
		l["status"] = st
	} else {
		delete(l, "status")
	}
	out := reflect.New(reflect.TypeOf(live).Elem()).Interface().(client.Object)
	return out, runtime.DefaultUnstructuredConverter.FromUnstructured(l, out)
}

// sharedBackoff spaces the retries of a write that met another writer's:
// jittered, so writers that met do not meet again.
var sharedBackoff = wait.Backoff{Steps: 10, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.5}

// merge is the conditions list a writer writes onto live: each type it
// owns as after has it (or none), each other type as after has it where it
// differs from before (the writer changed it), else as live has it,
// whoever wrote it. Live's order is kept; new types come last.
func merge(live, before, after []metav1.Condition, owns func(string) bool) []metav1.Condition {
	mine := func(typ string) bool {
		return (owns != nil && owns(typ)) || !equality.Semantic.DeepEqual(find(before, typ), find(after, typ))
	}
	var out []metav1.Condition
	for _, c := range live {
		switch a := find(after, c.Type); {
		case !mine(c.Type):
			out = append(out, c)
		case a != nil:
			out = append(out, *a)
		}
	}
	for _, c := range after {
		if find(live, c.Type) == nil && mine(c.Type) {
			out = append(out, c)
		}
	}
	return out
}

func find(list []metav1.Condition, typ string) *metav1.Condition {
	for i := range list {
		if list[i].Type == typ {
			return &list[i]
		}
	}
	return nil
}

func conditionsOf(obj client.Object) []metav1.Condition {
	if g, ok := obj.(conditions.Getter); ok {
		return g.GetConditions()
	}
	return nil
}

func setConditions(obj client.Object, list []metav1.Condition) {
	if s, ok := obj.(conditions.Setter); ok {
		s.SetConditions(list)
	}
}

// generationObserver is a kind whose status records the generation it
// describes: each of trainops's kinds.
type generationObserver interface {
	ObserveGeneration()
}

// Observe sets obj's status.observedGeneration to its generation.
func Observe(obj client.Object) {
	if o, ok := obj.(generationObserver); ok {
		o.ObserveGeneration()
	}
}
