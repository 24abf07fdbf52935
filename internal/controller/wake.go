// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/gate"
)

// wakeups enqueue objects whose reconcile stepped aside for the sync's
// gate, when the gate opens: a held reconcile returns at once rather than
// waiting in its worker.
type wakeups struct {
	once sync.Once
	ch   chan event.GenericEvent
}

func (w *wakeups) channel() chan event.GenericEvent {
	w.once.Do(func() { w.ch = make(chan event.GenericEvent, 1024) })
	return w.ch
}

// source is the event source to watch: it enqueues each woken object.
func (w *wakeups) source() source.Source {
	return source.Channel(w.channel(), &handler.EnqueueRequestForObject{})
}

// park parks a wake-up for obj (a new empty object of its kind, named
// key) with g, and reports whether it did: false when g holds no one back.
// then runs after the wake-up is sent.
func (w *wakeups) park(g *gate.Gate, obj client.Object, key types.NamespacedName, then func()) bool {
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	ch := w.channel()
	return g.Park(func() {
		ch <- event.GenericEvent{Object: obj}
		if then != nil {
			then()
		}
	})
}

// stepAside says whether the reconcile of an SREAgent or ClusterPolicy
// should step aside, and when it comes back: while the sync's gate is held
// (woken when it opens) and while a burst of PyJob first passes runs
// (looked at again shortly, for burstWait at most, a ClusterPolicy for
// freshWait). Either way the reconcile returns at once.
func (w *wakeups) stepAside(g *gate.Gate, jf *JobsFirst, obj client.Object, key types.NamespacedName) (ctrl.Result, bool) {
	kind := fmt.Sprintf("%T", obj)
	if w.park(g, obj, key, nil) {
		return ctrl.Result{}, true
	}
	most := burstWait
	if _, ok := obj.(*gpuv1alpha1.ClusterPolicy); ok {
		most = freshWait
	}
	if after, ok := jf.stepAside(kind+" "+key.String(), most); ok {
		return ctrl.Result{RequeueAfter: after}, true
	}
	return ctrl.Result{}, false
}
