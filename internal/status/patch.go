// SPDX-License-Identifier: Apache-2.0

package status

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// upgrade), and reads the object live. A write then changes only the
	// conditions this writer changed, onto the list as the API server has
	// it, under its resourceVersion: a writer working from a stale copy
	// never puts back another's old condition. Nil: every field written
	// has one writer, and a write needs no read and no lock.
	Shared client.Reader
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

// patch writes obj's status when it differs from the one last written (or
// read); what it wrote is the base of the next.
func (p *patcher) patch(ctx context.Context, obj client.Object) error {
	data, err := client.MergeFrom(p.before).Data(obj)
	if err != nil {
		return err
	}
	if string(data) == "{}" {
		return nil
	}
	before, after := conditionsOf(p.before), conditionsOf(obj)
	if p.Shared != nil && !equality.Semantic.DeepEqual(before, after) {
		err = p.patchShared(ctx, obj, before, after)
	} else {
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

// patchShared writes obj's status with its conditions list the live one
// with this writer's changes (before to after) applied, under the live
// resourceVersion; on a conflict it reads again.
func (p *patcher) patchShared(ctx context.Context, obj client.Object, before, after []metav1.Condition) error {
	return retry.RetryOnConflict(sharedBackoff, func() error {
		live := obj.DeepCopyObject().(client.Object)
		if err := p.Shared.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
			return err
		}
		merged := applyChanges(conditionsOf(live), before, after)
		base := p.before.DeepCopyObject().(client.Object)
		setConditions(base, conditionsOf(live))
		base.SetResourceVersion(live.GetResourceVersion())
		target := obj.DeepCopyObject().(client.Object)
		setConditions(target, merged)
		if err := p.Client.Status().Patch(ctx, target, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(builder.FieldManager)); err != nil {
			return err
		}
		setConditions(obj, merged)
		obj.SetResourceVersion(target.GetResourceVersion())
		return nil
	})
}

// sharedBackoff spaces the retries of a write that met another writer's:
// jittered, so writers that met do not meet again.
var sharedBackoff = wait.Backoff{Steps: 10, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.5}

// applyChanges is live with every condition that differs between before
// and after set to after's (or removed, when after has none of its type);
// the others are live's, whoever wrote them.
func applyChanges(live, before, after []metav1.Condition) []metav1.Condition {
	out := append([]metav1.Condition(nil), live...)
	seen := map[string]bool{}
	for _, list := range [][]metav1.Condition{before, after} {
		for _, c := range list {
			if seen[c.Type] {
				continue
			}
			seen[c.Type] = true
			b, a := find(before, c.Type), find(after, c.Type)
			if equality.Semantic.DeepEqual(b, a) {
				continue
			}
			i := -1
			for j := range out {
				if out[j].Type == c.Type {
					i = j
				}
			}
			switch {
			case a == nil && i >= 0:
				out = append(out[:i], out[i+1:]...)
			case a != nil && i >= 0:
				out[i] = *a
			case a != nil:
				out = append(out, *a)
			}
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
