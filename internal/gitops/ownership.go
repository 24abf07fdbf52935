// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/builder"
)

// An object belongs to a sync because the sync's inventory records it, by
// UID: the sync label is a convenience for people and for the plan's
// lists, never proof, as anyone who may write an object may label it.
//
// An entry recorded before UIDs were (its UID empty) counts as the live
// object of its name only while trainops's own apply owns fields of it;
// the next apply, or plan, records the UID.

// owns reports whether the live object with uid, whose managed fields hold
// trainops's own apply entry when ownApply, is the object en records.
func owns(en Entry, uid types.UID, ownApply bool) bool {
	if en.UID != "" {
		return types.UID(en.UID) == uid
	}
	return ownApply
}

// ownsMeta is owns for an object's metadata.
func ownsMeta(en Entry, m *metav1.ObjectMeta) bool {
	return owns(en, m.UID, hasOwnApply(m.ManagedFields))
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
		case !ownsMeta(g, &m.ObjectMeta):
			delete(inv.Entries, g.Key())
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s (not the object this sync applied: left alone)", g.ID()))
		default:
			out = append(out, g)
		}
	}
	sort.Strings(res.Skipped)
	return out, nil
}
