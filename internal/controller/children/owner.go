// SPDX-License-Identifier: Apache-2.0

package children

import (
	"context"

	"github.com/fluxcd/pkg/runtime/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The prologue and epilogue the three reconcilers share: read the object,
// reconcile it, write its status once.

// Load reads the object named key into obj, and reports whether there is
// anything to reconcile: false when it is gone or going (owner references
// take its children with it), with an error only when the read failed.
func Load(ctx context.Context, c client.Reader, key client.ObjectKey, obj client.Object) (bool, error) {
	if err := c.Get(ctx, key, obj); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return obj.GetDeletionTimestamp().IsZero(), nil
}

// Begin starts the reconcile of an SREAgent or ClusterPolicy: it reads
// obj. Unless ok, the reconcile returns res and err at once: obj is gone
// or being deleted, or new and held by the sync still applying it
// (HeldNew).
func (d *Deps) Begin(ctx context.Context, req ctrl.Request, obj client.Object) (res ctrl.Result, ok bool, err error) {
	ok, err = Load(ctx, d.Client, req.NamespacedName, obj)
	if ok && Unreconciled(obj) {
		if res, held := d.HeldNew(ctx, obj); held {
			return res, false, nil
		}
	}
	return ctrl.Result{}, ok, err
}

// Unreconciled reports whether obj's status was never written: it has no
// condition yet.
func Unreconciled(obj client.Object) bool {
	g, ok := obj.(conditions.Getter)
	return ok && len(g.GetConditions()) == 0
}
