// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/fluxcd/pkg/runtime/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The prologue and epilogue the three reconcilers share: read the object,
// reconcile it, write its status once.

// load reads the object named key into obj, and reports whether there is
// anything to reconcile: false when it is gone or going (owner references
// take its children with it), with an error only when the read failed.
func load(ctx context.Context, c client.Reader, key client.ObjectKey, obj client.Object) (bool, error) {
	if err := c.Get(ctx, key, obj); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return obj.GetDeletionTimestamp().IsZero(), nil
}

// begin starts the reconcile of an SREAgent or ClusterPolicy: it reads
// obj. Unless ok, the reconcile returns res and err at once: obj is gone
// or being deleted.
func (d *Deps) begin(ctx context.Context, req ctrl.Request, obj client.Object) (res ctrl.Result, ok bool, err error) {
	ok, err = load(ctx, d.Client, req.NamespacedName, obj)
	return ctrl.Result{}, ok, err
}

// WithStatus runs reconcile, then writes obj's status in one request: the
// observedGeneration when the generation settled (see settled), and one
// merge patch of what the reconcile changed (none when nothing did). After
// a write without error, and a reconcile without one, done runs: it
// records the transitions the reconcile made.
func WithStatus(ctx context.Context, c client.Client, obj client.Object, reconcile func() (ctrl.Result, error), done func()) (ctrl.Result, error) {
	return WithStatusCheckpoints(ctx, c, obj, func(func(context.Context) error) (ctrl.Result, error) { return reconcile() }, done)
}

// WithStatusCheckpoints is WithStatus whose reconcile may write obj's
// status as it stands, mid-way, by calling checkpoint: the final write
// then sends what changed since.
func WithStatusCheckpoints(ctx context.Context, c client.Client, obj client.Object, reconcile func(checkpoint func(context.Context) error) (ctrl.Result, error), done func()) (res ctrl.Result, retErr error) {
	patcher := newStatusPatcher(c, obj)
	defer func() {
		if g, ok := obj.(conditions.Getter); ok && settled(g, retErr) {
			observe(obj)
		}
		if err := patcher.patch(ctx, obj); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("patch status: %w", err))
		}
		if retErr == nil && done != nil {
			done()
		}
	}()
	return reconcile(func(ctx context.Context) error { return patcher.patch(ctx, obj) })
}

// generationObserver is a kind whose status records the generation it
// describes: each of trainops's kinds.
type generationObserver interface {
	ObserveGeneration()
}

// observe sets obj's status.observedGeneration to its generation.
func observe(obj client.Object) {
	if o, ok := obj.(generationObserver); ok {
		o.ObserveGeneration()
	}
}
