// SPDX-License-Identifier: Apache-2.0

package children

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Pruner deletes an owner's children that it no longer wants.
type Pruner struct {
	Client   client.Client
	Recorder events.EventRecorder
}

// Prune lists, for each kind in lists, the objects matching opts, and
// deletes those owner controls (by UID) that want does not hold
// (want's keys: childKey). why ends the Event recorded for each.
func (p Pruner) Prune(ctx context.Context, owner client.Object, lists map[string]client.ObjectList, want map[string]bool, why string, opts ...client.ListOption) error {
	kinds := make([]string, 0, len(lists))
	for k := range lists {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, kind := range kinds {
		l := lists[kind]
		if err := p.Client.List(ctx, l, opts...); err != nil {
			return fmt.Errorf("list %s children: %w", kind, err)
		}
		items, err := metaItems(l)
		if err != nil {
			return err
		}
		for _, o := range items {
			if want[childKey(kind, o)] || !controlledBy(o, owner) {
				continue
			}
			if err := p.Client.Delete(ctx, o, client.PropagationPolicy("Background")); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete %s %s: %w", kind, objectKey(o), err)
			}
			p.Recorder.Eventf(owner, nil, corev1.EventTypeNormal, "Removed", "Delete", "removed %s %s: %s", kind, objectKey(o), why)
		}
	}
	return nil
}

// childKey identifies a child of kind among an owner's children.
func childKey(kind string, o client.Object) string {
	return kind + "/" + o.GetNamespace() + "/" + o.GetName()
}

// WantKeys are the childKeys of objs.
func WantKeys(objs []client.Object) map[string]bool {
	want := map[string]bool{}
	for _, o := range objs {
		want[childKey(o.GetObjectKind().GroupVersionKind().Kind, o)] = true
	}
	return want
}

// controlledBy reports whether owner is o's controller.
func controlledBy(o, owner client.Object) bool {
	ref := metav1.GetControllerOfNoCopy(o)
	return ref != nil && ref.UID == owner.GetUID()
}

// metaItems returns a list's items as client.Objects.
func metaItems(l client.ObjectList) ([]client.Object, error) {
	objs, err := meta.ExtractList(l)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		if co, ok := o.(client.Object); ok {
			out = append(out, co)
		}
	}
	return out, nil
}
