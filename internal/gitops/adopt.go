// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"sort"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/apierr"
	"github.com/trainops/trainops/internal/check"
)

// listAbove is how many new objects of one kind in one namespace are
// looked up with one metadata list rather than one GET each.
const listAbove = 8

// refuseTakeovers refuses the revision when it would apply over an object
// that exists but that this sync did not create: not the object its
// inventory records (by UID), not annotated for adoption (see takeover). Such
// an object belongs to someone else (an admin's namespace, another
// controller's ConfigMap); applying would take it over, and removing it
// from Git later would delete it. Objects found and allowed are marked as
// existing, so they are dry-run on the server. The objects are looked up
// as the sync's identity (the writer): a sync acting as a ServiceAccount
// learns nothing of objects it may not read, not even that they exist.
//
// The revision's new Namespaces are looked up first: nothing can exist in
// a namespace that does not (the API server's NamespaceLifecycle admits
// nothing into one), so the objects of a namespace the revision creates
// cost no lookup. A cold sync's objects are mostly in such namespaces.
func (e *Engine) refuseTakeovers(ctx context.Context, changed []*desired, inv *Inventory, revision string) error {
	namespaces, rest := map[lookupGroup][]*desired{}, map[lookupGroup][]*desired{}
	for _, d := range changed {
		if d.ours {
			continue // the plan found the object the inventory records
		}
		g := lookupGroup{d.gvk, d.obj.GetNamespace()}
		if isNamespace(d.gvk) {
			namespaces[g] = append(namespaces[g], d)
		} else {
			rest[g] = append(rest[g], d)
		}
	}
	if len(namespaces)+len(rest) == 0 {
		return nil
	}
	l := &lookups{found: map[*desired]*metav1.PartialObjectMetadata{}, absent: map[*desired]bool{}}
	e.lookUp(ctx, namespaces, l)
	absent := map[string]bool{}
	for _, ds := range namespaces {
		for _, d := range ds {
			if l.absent[d] {
				absent[d.name] = true
			}
		}
	}
	maps.DeleteFunc(rest, func(g lookupGroup, _ []*desired) bool { return g.ns != "" && absent[g.ns] })
	e.lookUp(ctx, rest, l)
	problems := l.problems
	for d, m := range l.found {
		if p := e.takeover(d, m, inv); p != nil {
			problems = append(problems, *p)
			continue
		}
		d.exists = true
	}
	if len(problems) > 0 {
		sort.Slice(problems, func(i, j int) bool { return problems[i].String() < problems[j].String() })
		reason := ReasonTakeoverRefused
		if l.forbidden.Load() {
			reason = ReasonForbidden
		}
		return &SyncError{Reason: reason, Revision: revision, Problems: problems}
	}
	return nil
}

// lookupGroup is the objects of one kind in one namespace, looked up
// together.
type lookupGroup struct {
	gvk schema.GroupVersionKind
	ns  string
}

// lookups is what refuseTakeovers learned of the live objects.
type lookups struct {
	mu       sync.Mutex
	found    map[*desired]*metav1.PartialObjectMetadata
	absent   map[*desired]bool // known not to exist
	problems []Problem
	// forbidden: the sync's identity may not read an object it names.
	forbidden atomic.Bool
}

// lookUp looks up the live objects of groups: a group of more than
// listAbove with one metadata list, the others with one GET each.
func (e *Engine) lookUp(ctx context.Context, groups map[lookupGroup][]*desired, l *lookups) {
	var single []*desired
	var wg sync.WaitGroup
	for g, ds := range groups {
		if len(ds) <= listAbove {
			single = append(single, ds...)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			live, err := e.listMetadata(ctx, g.gvk, g.ns)
			l.mu.Lock()
			defer l.mu.Unlock()
			if apierrors.IsForbidden(err) {
				l.forbidden.Store(true)
			}
			if err != nil {
				l.problems = append(l.problems, Problem{Object: check.GVKString(g.gvk) + " in " + cmp.Or(g.ns, "the cluster"), Message: "look up existing objects: " + apierr.Message(err)})
				return
			}
			for _, d := range ds {
				if m, ok := live[d.obj.GetName()]; ok {
					l.found[d] = m
				} else {
					l.absent[d] = true
				}
			}
		}()
	}
	problems := e.each(ctx, single, func(ctx context.Context, d *desired) *Problem {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(d.gvk)
		err := e.writer().Get(ctx, client.ObjectKey{Namespace: d.obj.GetNamespace(), Name: d.obj.GetName()}, m)
		if client.IgnoreNotFound(err) != nil {
			if apierrors.IsForbidden(err) {
				l.forbidden.Store(true)
			}
			return &Problem{File: d.file, Object: d.id(), Message: "look up the existing object: " + apierr.Message(err)}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if err == nil {
			l.found[d] = m
		} else {
			l.absent[d] = true
		}
		return nil
	})
	wg.Wait()
	l.problems = append(l.problems, problems...)
}

// takeover says why d may not be applied over the live object m, or nil
// when it may: m is the object the inventory records (its UID), or carries
// the adoption annotation, or is unrecorded but carries this sync's label
// and trainops's own apply (applied by a sync that stopped before it could
// record it). The label alone proves nothing.
func (e *Engine) takeover(d *desired, m *metav1.PartialObjectMetadata, inv *Inventory) *Problem {
	en, recorded := inv.Entries[d.key]
	switch {
	case m.Annotations[AnnotationAdopt] == "true",
		recorded && e.ownsMeta(en, &m.ObjectMeta),
		!recorded && m.Labels[LabelSync] == e.SyncLabel() && hasOwnApply(m.ManagedFields):
		return nil
	}
	owner := "trainops did not create it"
	other := m.Labels[LabelSync]
	switch {
	case other == e.SyncLabel():
		other, owner = "", "it carries this sync's label but this sync did not apply it (a label is not proof of ownership)"
	case other != "":
		name := "the trainops of namespace " + other
		if e.Opts.OwnerName != nil {
			name = e.Opts.OwnerName(other)
		}
		owner = "it belongs to " + name
	}
	return &Problem{File: d.file, Object: d.id(), Owner: other, Message: fmt.Sprintf(
		"%s already exists and %s: a sync never takes over an object it did not create. Rename it in the repository, or, to hand the existing object to trainops, annotate it %s=true",
		d.id(), owner, AnnotationAdopt)}
}

// listMetadata lists the metadata of every object of gvk in ns (the whole
// cluster for cluster-scoped kinds), by name.
func (e *Engine) listMetadata(ctx context.Context, gvk schema.GroupVersionKind, ns string) (map[string]*metav1.PartialObjectMetadata, error) {
	out := map[string]*metav1.PartialObjectMetadata{}
	next := ""
	for {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		opts := []client.ListOption{client.Limit(500), client.Continue(next)}
		if ns != "" {
			opts = append(opts, client.InNamespace(ns))
		}
		if err := e.writer().List(ctx, list, opts...); err != nil {
			return nil, err
		}
		for i := range list.Items {
			out[list.Items[i].Name] = &list.Items[i]
		}
		if next = list.Continue; next == "" {
			return out, nil
		}
	}
}
