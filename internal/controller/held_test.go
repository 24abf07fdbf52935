// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/gate"
)

// TestHeldReconcileFreesItsWorker: with one worker and the sync's gate
// held, a PyJob's reconcile returns at once (counted as done by
// controller-runtime) and leaves its worker free, instead of waiting in it;
// nothing is written for it while the gate is held, and its Job is created
// as soon as the gate opens, without waiting for the bound on the hold.
func TestHeldReconcileFreesItsWorker(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	own := isolatedManager(t, ns)
	g := &gate.Gate{MaxHold: time.Hour}
	release := g.Hold()
	defer release()
	r := &PyJobReconciler{Deps: Deps{Client: own.GetClient(), Recorder: own.GetEventRecorder(EventSource), Config: testCfg, Gate: g}}
	const name = "pyjob-held"
	err := ctrl.NewControllerManagedBy(own).
		For(&trainingv1alpha1.PyJob{}, specChanged).
		WatchesRawSource(r.wake.source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, SkipNameValidation: ptr.To(true)}).
		Named(name).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	startIsolated(t, own)
	pj := &trainingv1alpha1.PyJob{}
	loadCase(t, seed("distributed-training"), pj)
	pj.Namespace, pj.Name = ns, "held"
	pj.Labels = map[string]string{isolatedLabel: "true"}
	pj.Spec.Suspend = ptr.To(true)
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if n := controllerMetric(t, "controller_runtime_reconcile_total", name, "success"); n < 1 {
			return fmt.Errorf("%v reconciles done", n)
		}
		return nil
	})
	for range 10 {
		if busy := controllerMetric(t, "controller_runtime_active_workers", name, ""); busy != 0 {
			t.Fatalf("%v workers busy while the PyJob is held", busy)
		}
		time.Sleep(50 * time.Millisecond)
	}
	job := &batchv1.Job{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.JobName(pj)}, job); !apierrors.IsNotFound(err) {
		t.Fatalf("Job written while the gate was held (err %v)", err)
	}
	release()
	eventually(t, 20*time.Second, func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.JobName(pj)}, job)
	})
}

// controllerMetric reads a controller-runtime metric of one controller
// (and result, when given) from its registry; 0 when absent.
func controllerMetric(t *testing.T, family, controllerName, result string) float64 {
	t.Helper()
	fams, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != family {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["controller"] != controllerName || (result != "" && labels["result"] != result) {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
