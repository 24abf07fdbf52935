// SPDX-License-Identifier: Apache-2.0

package status

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/scheme"
)

// The ClusterPolicy's three writers, each owning one condition here, as
// they share its list: the reconciler (Ready), remediation
// (GPUNodesHealthy), the driver upgrade (DriverUpgraded).
const (
	healthy  = "GPUNodesHealthy"
	upgraded = "DriverUpgraded"
)

func newClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// write is one writer's pass on its copy cp: the reconciler through
// Around, the others through Change, as their code calls them.
func write(ctx context.Context, w Writer, cp *gpuv1alpha1.ClusterPolicy, typ, msg string) error {
	if typ == ReadyCondition {
		_, err := w.Around(ctx, cp, func(func(context.Context) error) (ctrl.Result, error) {
			MarkDone(cp, true, ReasonSucceeded, "%s", msg)
			return ctrl.Result{}, nil
		}, nil)
		return err
	}
	return w.Change(ctx, cp, func() { conditions.MarkTrue(cp, typ, "Writer", "%s", msg) })
}

// TestSharedConditionsSurviveStaleWriters: the three writers of a
// ClusterPolicy's conditions, each working from a copy one write behind
// (a cache that has not seen the others' last writes), at once: no
// writer's condition is ever lost or put back to an old value.
func TestSharedConditionsSurviveStaleWriters(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	cp := &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{GenerateName: "writers-"}}
	if err := c.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, cp) })
	w := Writer{Client: c, Shared: c}

	// In turn: the upgrade and the reconciler write from a copy read
	// before remediation's write.
	stale := cp.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(cp), stale); err != nil {
		t.Fatal(err)
	}
	fresh := stale.DeepCopy()
	for _, step := range []struct {
		cp  *gpuv1alpha1.ClusterPolicy
		typ string
	}{{fresh, healthy}, {stale.DeepCopy(), upgraded}, {stale.DeepCopy(), ReadyCondition}} {
		if err := write(ctx, w, step.cp, step.typ, "first"); err != nil {
			t.Fatal(err)
		}
	}
	wantAll(t, c, cp, "first")

	// At once, each from the copy it read one write before.
	const passes = 20
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for _, typ := range []string{ReadyCondition, healthy, upgraded} {
		wg.Go(func() {
			behind := stale.DeepCopy()
			for i := range passes {
				cur := &gpuv1alpha1.ClusterPolicy{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(cp), cur); err != nil {
					errs <- err
					return
				}
				if err := write(ctx, w, behind, typ, fmt.Sprintf("pass %d", i)); err != nil {
					errs <- fmt.Errorf("%s: %w", typ, err)
					return
				}
				behind = cur
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	wantAll(t, c, cp, fmt.Sprintf("pass %d", passes-1))
}

// wantAll checks the live object holds each writer's condition with msg.
func wantAll(t *testing.T, c client.Client, cp *gpuv1alpha1.ClusterPolicy, msg string) {
	t.Helper()
	live := &gpuv1alpha1.ClusterPolicy{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(cp), live); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{ReadyCondition, healthy, upgraded} {
		if got := conditions.GetMessage(live, typ); got != msg {
			t.Errorf("%s: %q, want %q (conditions %+v)", typ, got, msg, live.Status.Conditions)
		}
	}
}

// TestOwnedConditionsFollowTheWriterNotItsStaleCopy: a writer whose copy
// has not seen its own last write (Reconciling, set a pass ago) settles
// the object: the live Reconciling goes, though its copy never had it,
// while another writer's condition stays.
func TestOwnedConditionsFollowTheWriterNotItsStaleCopy(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	cp := &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{GenerateName: "owned-"}}
	if err := c.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, cp) })
	stale := cp.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(cp), stale); err != nil {
		t.Fatal(err)
	}
	reconciler := Writer{Client: c, Shared: c, Owns: func(t string) bool { return t != healthy }}
	other := Writer{Client: c, Shared: c, Owns: func(t string) bool { return t == healthy }}
	if err := other.Change(ctx, stale.DeepCopy(), func() {}); err != nil {
		t.Fatal(err)
	}
	first := stale.DeepCopy()
	if _, err := reconciler.Around(ctx, first, func(func(context.Context) error) (ctrl.Result, error) {
		MarkInProgress(first, ReasonProgressing, "working")
		return ctrl.Result{}, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	h := stale.DeepCopy()
	if err := other.Change(ctx, h, func() { conditions.MarkTrue(h, healthy, "Writer", "fine") }); err != nil {
		t.Fatal(err)
	}
	second := stale.DeepCopy() // has seen neither write
	if _, err := reconciler.Around(ctx, second, func(func(context.Context) error) (ctrl.Result, error) {
		MarkDone(second, true, ReasonSucceeded, "done")
		return ctrl.Result{}, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	live := &gpuv1alpha1.ClusterPolicy{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cp), live); err != nil {
		t.Fatal(err)
	}
	if conditions.Has(live, ReconcilingCondition) || !conditions.IsReady(live) || conditions.GetMessage(live, healthy) != "fine" {
		t.Fatalf("conditions %+v: want Ready, no Reconciling, and the other writer's %s", live.Status.Conditions, healthy)
	}
}
