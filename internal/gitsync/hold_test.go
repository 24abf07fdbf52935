// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

// TestHoldHoldsOnlyAnApplyingSyncsNewObjects: an object is held while the
// GitSync its sync label names says it is applying, and only then: not
// for another GitSync's, nor an unlabelled one, nor past holdLimit; the
// settings' sync's objects (labelled with its namespace) alike. When the
// GitSync is done, Releases queues exactly its objects that were held.
func TestHoldHoldsOnlyAnApplyingSyncsNewObjects(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	gitSync := func(name string, applyingFor time.Duration) *gitopsv1alpha1.GitSync {
		gs := &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: gitopsv1alpha1.GitSyncSpec{Repository: gitopsv1alpha1.GitRepository{URL: "https://git.invalid/" + name + ".git", Branch: "main"}, Suspend: true}}
		if err := k8s.Create(ctx, gs); err != nil {
			t.Fatal(err)
		}
		if applyingFor > 0 {
			MarkApplying(gs, "main@sha1:0")
			gs.Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Now().Add(-applyingFor))
			if err := k8s.Status().Update(ctx, gs); err != nil {
				t.Fatal(err)
			}
		}
		return gs
	}
	applying := gitSync("applying", time.Second)
	done := gitSync("done", 0)
	stale := gitSync("stale", holdLimit+time.Minute)
	settings := gitSync("settings", time.Second)
	h := &Hold{Client: k8s, Settings: types.NamespacedName{Namespace: ns, Name: settings.Name}}

	pyjob := func(name, label string, started bool) *trainingv1alpha1.PyJob {
		pj := &trainingv1alpha1.PyJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: trainingv1alpha1.PyJobSpec{Image: "pytorch/pytorch:2.0-cuda11.7-cudnn8-devel", Command: []string{"python", "train.py"}, GPU: 1}}
		if label != "" {
			pj.Labels = map[string]string{gitopsv1alpha1.LabelSync: label}
		}
		if err := k8s.Create(ctx, pj); err != nil {
			t.Fatal(err)
		}
		if started {
			pj.Status.Phase = trainingv1alpha1.PyJobRunning
			pj.Status.ObservedGeneration = pj.Generation
			if err := k8s.Status().Update(ctx, pj); err != nil {
				t.Fatal(err)
			}
		}
		return pj
	}
	for _, c := range []struct {
		pj   *trainingv1alpha1.PyJob
		held bool
	}{
		{pyjob("new", GitSyncLabel(ns, applying.Name), false), true},
		{pyjob("of-done", GitSyncLabel(ns, done.Name), false), false},
		{pyjob("of-stale", GitSyncLabel(ns, stale.Name), false), false},
		{pyjob("of-none", GitSyncLabel(ns, "missing"), false), false},
		{pyjob("unlabelled", "", false), false},
		{pyjob("of-settings", ns, false), true},
		{pyjob("another-namespace-label", "kube-system", false), false},
	} {
		wait, held := h.Held(ctx, c.pj)
		if held != c.held {
			t.Errorf("PyJob %s (sync label %q): held %v, want %v", c.pj.Name, c.pj.Labels[gitopsv1alpha1.LabelSync], held, c.held)
		}
		if held && (wait <= 0 || wait > holdLimit-500*time.Millisecond) {
			t.Errorf("PyJob %s held for %s, want at most what is left of %s", c.pj.Name, wait, holdLimit)
		}
	}
	started := pyjob("started", GitSyncLabel(ns, applying.Name), true)

	obj, pred, fn := h.Releases(&trainingv1alpha1.PyJobList{}, func(o client.Object) bool {
		pj := o.(*trainingv1alpha1.PyJob)
		return pj.Status.Phase == ""
	})
	if _, ok := obj.(*gitopsv1alpha1.GitSync); !ok {
		t.Fatalf("Releases watches %T", obj)
	}
	finished := applying.DeepCopy()
	status.MarkDone(finished, true, status.ReasonSucceeded, "applied")
	if !pred.Update(event.UpdateEvent{ObjectOld: applying, ObjectNew: finished}) {
		t.Error("a GitSync done applying releases nothing")
	}
	if pred.Update(event.UpdateEvent{ObjectOld: applying, ObjectNew: applying}) || pred.Update(event.UpdateEvent{ObjectOld: done, ObjectNew: done}) {
		t.Error("a GitSync still applying, or not applying before, releases")
	}
	if !pred.Delete(event.DeleteEvent{Object: applying}) || pred.Delete(event.DeleteEvent{Object: done}) {
		t.Error("only a GitSync deleted while applying releases on deletion")
	}
	var got []string
	for _, r := range fn(ctx, applying) {
		got = append(got, r.Name)
	}
	if !slices.Equal(got, []string{"new"}) {
		t.Errorf("a GitSync done applying queues %v, want [new] (not %s, started)", got, started.Name)
	}
	got = got[:0]
	for _, r := range fn(ctx, settings) {
		got = append(got, r.Name)
	}
	if !slices.Equal(got, []string{"of-settings"}) {
		t.Errorf("the settings' sync done applying queues %v, want [of-settings]", got)
	}
}
