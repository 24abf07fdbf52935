// SPDX-License-Identifier: Apache-2.0

package diff

import (
	"context"
	"fmt"

	"github.com/fluxcd/pkg/ssa"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/apierr"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/offline"
	"github.com/trainops/trainops/render"
)

// Live compares what a sync would do (p, from gitops.Engine.Preview) with
// the cluster. Each object the sync would apply is applied as a server-side
// dry run (defaults and admission included) and compared with the live
// object; a change the API server refuses is shown and flagged with its
// reason. Each object the sync would prune is read. Every other error is
// returned: a diff that cannot read the cluster says so rather than show
// less.
func Live(ctx context.Context, c client.Client, p *gitops.Preview) (*Report, error) {
	rm := ssa.NewResourceManager(c, nil, ssa.Owner{Field: builder.FieldManager, Group: "trainops.dev"})
	var base, head []offline.Item
	type refusal struct {
		obj  *unstructured.Unstructured
		file string
		msg  string
	}
	var refused []refusal
	for _, o := range p.Apply {
		entry, existing, dryRun, err := rm.Diff(ctx, o.Object.DeepCopy(), ssa.DefaultDiffOptions())
		if err != nil {
			// Refused (an immutable field, a conflict): show the change
			// against the live object and say why.
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(o.Object.GroupVersionKind())
			if gerr := c.Get(ctx, client.ObjectKeyFromObject(o.Object), live); gerr != nil {
				return nil, fmt.Errorf("%s: %s: %w", o.File, render.ObjectID(o.Object), err)
			}
			base = append(base, offline.Item{Object: clean(live), File: o.File})
			head = append(head, offline.Item{Object: o.Object, File: o.File})
			refused = append(refused, refusal{o.Object, o.File, apierr.Message(err)})
			continue
		}
		switch entry.Action {
		case ssa.CreatedAction:
			head = append(head, offline.Item{Object: o.Object, File: o.File})
		case ssa.ConfiguredAction:
			base = append(base, offline.Item{Object: clean(existing), File: o.File})
			head = append(head, offline.Item{Object: clean(dryRun), File: o.File})
		}
	}
	for _, e := range p.Prune {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(e.GVK())
		u.SetNamespace(e.Namespace)
		u.SetName(e.Name)
		if err := c.Get(ctx, client.ObjectKeyFromObject(u), u); apierrors.IsNotFound(err) {
			continue // already gone
		} else if err != nil {
			return nil, fmt.Errorf("read %s, which the sync would prune: %w", e.ID(), err)
		}
		base = append(base, offline.Item{Object: clean(u)})
	}
	r := Compare(base, head, nil, nil)
	for _, x := range refused {
		r.MarkRefused(x.obj, x.file, x.msg)
	}
	if p.OverBudget {
		r.Warnings = append(r.Warnings, fmt.Sprintf("deletes %d of %d objects trainops applied: past the prune budget, the sync will refuse the revision", len(p.Prune), p.Recorded))
	}
	return r, nil
}

// clean drops what the server sets, so only configuration is compared.
func clean(u *unstructured.Unstructured) *unstructured.Unstructured {
	u = u.DeepCopy()
	for _, f := range [][]string{{"metadata", "managedFields"}, {"metadata", "resourceVersion"}, {"metadata", "uid"}, {"metadata", "creationTimestamp"}, {"metadata", "generation"}, {"status"}} {
		unstructured.RemoveNestedField(u.Object, f...)
	}
	return u
}
