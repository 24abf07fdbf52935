// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

// TestContestedClaimsSurviveConcurrentWriters: a GitSync's status has
// several writers at once: claimants add their claims to its
// status.contested, its own sync drops the claims no longer made, and its
// own status write records a sync from an object read before all that.
// No claim written meanwhile is lost, and the stale one goes.
func TestContestedClaimsSurviveConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	mk := func(name string) *gitopsv1alpha1.GitSync {
		gs := &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: gitopsv1alpha1.GitSyncSpec{
			Repository: gitopsv1alpha1.GitRepository{URL: "https://git.invalid/" + name + ".git", Branch: "main"},
			Suspend:    true,
		}}
		if err := k8s.Create(ctx, gs); err != nil {
			t.Fatal(err)
		}
		return gs
	}
	owner := mk("owner")
	key := client.ObjectKeyFromObject(owner)
	// A claim whose claimant is gone: the owner's sync drops it.
	owner.Status.Contested = []gitopsv1alpha1.ContestedObject{{Object: "PyJob " + ns + "/stale", ClaimedBy: ns + "/gone"}}
	if err := k8s.Status().Update(ctx, owner); err != nil {
		t.Fatal(err)
	}
	const claimants = 8
	var want []gitopsv1alpha1.ContestedObject
	for i := range claimants {
		c := mk(fmt.Sprintf("claimant-%d", i))
		object := fmt.Sprintf("PyJob %s/object-%d", ns, i)
		status.MarkStalled(c, gitops.ReasonTakeoverRefused, "revision holds %s", object)
		c.Status.LastError = []gitopsv1alpha1.SyncProblem{{Object: object, Message: "belongs to GitSync " + key.String()}}
		if err := k8s.Status().Update(ctx, c); err != nil {
			t.Fatal(err)
		}
		want = append(want, gitopsv1alpha1.ContestedObject{Object: object, ClaimedBy: ns + "/" + c.Name})
	}
	stale := &gitopsv1alpha1.GitSync{}
	if err := k8s.Get(ctx, key, stale); err != nil {
		t.Fatal(err)
	}

	r := &GitSyncReconciler{Live: k8s, Recorder: events.NewFakeRecorder(claimants * 4)}
	// ownerWrite is the owner's own status write, from the object as read
	// before the claims: it must not carry status.contested.
	ownerWrite := func(i int) {
		gs := stale.DeepCopy()
		_, err := status.WithStatus(ctx, k8s, gs, func() (_ ctrl.Result, _ error) {
			RecordSync(gs, fmt.Sprintf("main@sha1:%040d", i), gitops.Result{}, nil)
			return
		}, nil)
		if err != nil {
			t.Errorf("status write %d: %v", i, err)
		}
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range claimants {
		wg.Go(func() {
			<-start
			r.setContested(ctx, key, types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("claimant-%d", i)}, []string{want[i].Object})
		})
	}
	for i := range claimants {
		wg.Go(func() {
			<-start
			if err := r.pruneContested(ctx, key); err != nil {
				t.Errorf("prune %d: %v", i, err)
			}
		})
		wg.Go(func() {
			<-start
			ownerWrite(i)
		})
	}
	close(start)
	wg.Wait()
	// Once more after the claims landed, as a reconcile of a cached copy
	// one write behind does.
	ownerWrite(claimants)
	if err := r.pruneContested(ctx, key); err != nil {
		t.Fatal(err)
	}
	got := &gitopsv1alpha1.GitSync{}
	if err := k8s.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !slices.Contains(got.Status.Contested, w) {
			t.Errorf("claim %v lost: status.contested %v", w, got.Status.Contested)
		}
	}
	if len(got.Status.Contested) != len(want) {
		t.Errorf("status.contested %v, want the %d live claims only", got.Status.Contested, len(want))
	}
	if got.Status.LastAppliedRevision == "" {
		t.Error("the owner's own status writes were lost")
	}
}
