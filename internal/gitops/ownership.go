// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/builder"
)

// An object belongs to a sync because the sync's inventory records it, by
// UID: the sync label is a convenience for people and for the plan's
// lists, never proof, as anyone who may write an object may label it.
//
// An entry without a UID (recorded before UIDs were, or pending: written
// just before the object's first apply, so a sync stopped before its
// inventory's save still knows what it applied) counts as the live object
// of its name only while that object carries this sync's label and
// trainops's own apply owns fields of it; the next apply, or plan, records
// the UID.

// owns reports whether the live object with uid, which carries this sync's
// label and whose managed fields hold trainops's own apply entry when
// labelledOwnApply, is the object en records.
func owns(en Entry, uid types.UID, labelledOwnApply bool) bool {
	if en.UID != "" {
		return types.UID(en.UID) == uid
	}
	return labelledOwnApply
}

// ownsMeta is owns for an object's metadata.
func (e *Engine) ownsMeta(en Entry, m *metav1.ObjectMeta) bool {
	return owns(en, m.UID, m.Labels[LabelSync] == e.SyncLabel() && hasOwnApply(m.ManagedFields))
}

// recordIntent adds to the inventory, and saves, an entry for each object
// about to be applied that it does not record yet, marked pending: were
// the process stopped between the apply and the inventory's save, the
// next sync would otherwise find those objects unrecorded and, once Git no
// longer holds them, leave them behind for good. It returns the inventory
// ConfigMap as saved.
func (e *Engine) recordIntent(ctx context.Context, store inventoryStore, inv *Inventory, cm *corev1.ConfigMap, changed []*desired) (*corev1.ConfigMap, error) {
	added := 0
	for _, d := range changed {
		if _, known := inv.Entries[d.key]; known {
			continue
		}
		inv.Entries[d.key] = Entry{Group: d.gvk.Group, Version: d.gvk.Version, Kind: d.gvk.Kind, Namespace: d.namespace, Name: d.name, Pending: true}
		added++
	}
	if added == 0 {
		return cm, nil
	}
	saved, err := store.Save(ctx, inv, cm)
	if err != nil {
		return cm, fmt.Errorf("record the objects about to be applied in the inventory: %w", err)
	}
	return saved, nil
}

// hasOwnApply reports whether trainops's own apply owns fields of an object.
func hasOwnApply(entries []metav1.ManagedFieldsEntry) bool {
	for _, m := range entries {
		if builder.OwnApply(m) {
			return true
		}
	}
	return false
}

// reportStrangers logs the objects that carry this sync's label but that
// its inventory does not record, once for as long as they stay: they are
// left alone (never pruned, never recorded). Only the last plan's strangers
// are remembered, so their number bounds what is kept.
func (e *Engine) reportStrangers(strangers []Entry) {
	e.strangersMu.Lock()
	defer e.strangersMu.Unlock()
	seen := make(map[string]bool, len(strangers))
	for _, en := range strangers {
		seen[en.Key()] = true
		if !e.strangers[en.Key()] {
			e.Log.Info("ignoring an object that carries this sync's label but is not in its inventory: it is neither pruned nor recorded",
				"object", en.ID(), "label", LabelSync+"="+e.SyncLabel())
		}
	}
	e.strangers = seen
}

// verifyGone keeps, of the objects leaving Git, those that are still the
// objects the inventory recorded, looked up as the sync's identity. An
// entry whose object is gone, or is now another object of the same name
// (deleted and made again by someone else), leaves the inventory and is
// not pruned: nothing a sync did not apply counts against its prune budget
// or is deleted by it.
func (e *Engine) verifyGone(ctx context.Context, gone []Entry, inv *Inventory, res *Result) ([]Entry, error) {
	out := gone[:0:0]
	for _, g := range gone {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(g.GVK())
		err := e.writer().Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: g.Name}, m)
		switch {
		case client.IgnoreNotFound(err) != nil:
			return nil, fmt.Errorf("look up %s before pruning it: %w", g.ID(), err)
		case err != nil:
			delete(inv.Entries, g.Key()) // gone already
		case !e.ownsMeta(g, &m.ObjectMeta):
			delete(inv.Entries, g.Key())
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s (not the object this sync applied: left alone)", g.ID()))
		default:
			out = append(out, g)
		}
	}
	sort.Strings(res.Skipped)
	return out, nil
}
