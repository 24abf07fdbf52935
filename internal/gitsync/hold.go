// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/status"
)

// ReasonProgressing is the Reconciling reason of a GitSync applying a new
// revision: its sync's own new objects are held meanwhile (Hold).
const ReasonProgressing = "Progressing"

// holdLimit bounds how long after a sync starts applying its objects are
// held, whatever the sync does: a sync that never says it is done (its
// process stopped) holds nothing past it.
const holdLimit = 2 * time.Minute

// MarkApplying says in gs's status that its sync is applying revision:
// Reconciling, reason Progressing. The outcome replaces it (RecordSync).
func MarkApplying(gs *gitopsv1alpha1.GitSync, revision string) {
	conditions.MarkReconciling(gs, ReasonProgressing, "applying revision %s", revision)
}

// firstAttempt reports whether revision is new to gs: neither applied nor
// tried before. Only its first attempt is said to be applying: a revision
// refused as it is, tried again every interval, changes no status.
func firstAttempt(gs *gitopsv1alpha1.GitSync, revision string) bool {
	return revision != "" && revision != gs.Status.LastAppliedRevision && revision != gs.Status.LastAttemptedRevision
}

// applyingSince is when gs's sync started applying a revision, if its
// status says it is.
func applyingSince(gs *gitopsv1alpha1.GitSync) (time.Time, bool) {
	c := conditions.Get(gs, status.ReconcilingCondition)
	if c == nil || c.Status != "True" || c.Reason != ReasonProgressing {
		return time.Time{}, false
	}
	return c.LastTransitionTime.Time, true
}

// Hold is children.SyncHold for the GitSyncs and the settings' sync:
// an object is its sync's by its sync label, and held while that
// GitSync's status says it is applying (MarkApplying), at most holdLimit.
// It reads GitSyncs from Client (the manager's cache); what it decides
// from lives in the GitSyncs' status, so a restart loses nothing.
type Hold struct {
	Client client.Reader
	// Settings is the GitSync that stands for the settings' sync, whose
	// objects' sync label is its namespace.
	Settings types.NamespacedName
}

// gitSync is the GitSync whose sync label is label: read from the label,
// or the settings' sync for its namespace. A long name's hashed label
// names none: its objects are not held.
func (h *Hold) gitSync(label string) (types.NamespacedName, bool) {
	if key, ok := gitSyncOfLabel(label); ok {
		return key, true
	}
	return h.Settings, label != "" && label == h.Settings.Namespace
}

// Held implements children.SyncHold.
func (h *Hold) Held(ctx context.Context, obj client.Object) (time.Duration, bool) {
	key, ok := h.gitSync(obj.GetLabels()[gitopsv1alpha1.LabelSync])
	if !ok {
		return 0, false
	}
	gs := &gitopsv1alpha1.GitSync{}
	if err := h.Client.Get(ctx, key, gs); err != nil {
		return 0, false
	}
	since, ok := applyingSince(gs)
	if !ok {
		return 0, false
	}
	left := holdLimit - time.Since(since)
	return left, left > 0
}

// Releases implements children.SyncHold: a GitSync that stops applying
// (or goes) queues the objects of its sync that held says were held.
func (h *Hold) Releases(list client.ObjectList, held func(client.Object) bool) (client.Object, predicate.Predicate, handler.MapFunc) {
	applying := func(o client.Object) bool {
		gs, ok := o.(*gitopsv1alpha1.GitSync)
		if !ok {
			return false
		}
		_, ok = applyingSince(gs)
		return ok
	}
	pred := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(e event.UpdateEvent) bool { return applying(e.ObjectOld) && !applying(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return applying(e.Object) },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	fn := func(ctx context.Context, o client.Object) []reconcile.Request {
		labels := []string{GitSyncLabel(o.GetNamespace(), o.GetName())}
		if client.ObjectKeyFromObject(o) == h.Settings {
			labels = append(labels, h.Settings.Namespace)
		}
		var out []reconcile.Request
		for _, label := range labels {
			l := list.DeepCopyObject().(client.ObjectList)
			if err := h.Client.List(ctx, l, client.MatchingLabels{gitopsv1alpha1.LabelSync: label}); err != nil {
				continue
			}
			_ = apimeta.EachListItem(l, func(item runtime.Object) error {
				if obj, ok := item.(client.Object); ok && held(obj) {
					out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
				}
				return nil
			})
		}
		return out
	}
	return &gitopsv1alpha1.GitSync{}, pred, fn
}
