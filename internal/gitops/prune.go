// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"errors"
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"

	"github.com/trainops/trainops/internal/apierr"
	"github.com/trainops/trainops/internal/builder"
)

// prune deletes objects that left Git, except those that must stay: marked
// with trainops.dev/prune: disabled, claims holding training data, and
// namespaces that still hold objects from Git.
func (e *Engine) prune(ctx context.Context, gone []Entry, inv *Inventory, res *Result) error {
	claimsInUse, err := e.claimsInUse(ctx, gone)
	if err != nil {
		return err
	}
	goneKeys := map[string]bool{}
	for _, g := range gone {
		goneKeys[g.Key()] = true
	}
	stillUsed := map[string]bool{}
	for _, en := range inv.Entries {
		if en.Namespace != "" && !goneKeys[en.Key()] {
			stillUsed[en.Namespace] = true
		}
	}
	var problems []Problem
	for _, g := range gone {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(g.GVK())
		err := e.writer().Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: g.Name}, m)
		if client.IgnoreNotFound(err) != nil {
			problems = append(problems, Problem{Object: g.ID(), Message: apierr.Message(err)})
			continue
		}
		if err != nil || !e.ownsMeta(g, &m.ObjectMeta) {
			delete(inv.Entries, g.Key()) // gone already, or not the object applied
			continue
		}
		if reason := e.keep(g, m, claimsInUse, stillUsed); reason != "" {
			res.Skipped = append(res.Skipped, fmt.Sprintf("%s (%s)", g.ID(), reason))
			delete(inv.Entries, g.Key())
			continue
		}
		if err := e.writer().Delete(ctx, m, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			problems = append(problems, Problem{Object: g.ID(), Message: apierr.Message(err)})
			continue
		}
		delete(inv.Entries, g.Key())
		res.Pruned = append(res.Pruned, g.ID())
	}
	sort.Strings(res.Pruned)
	if len(problems) > 0 {
		return &SyncError{Reason: ReasonPruneFailed, Revision: res.Revision, Problems: problems}
	}
	return nil
}

// keep says why an object leaving Git stays, or "" to delete it.
func (e *Engine) keep(g Entry, m *metav1.PartialObjectMetadata, claimsInUse, nsInUse map[string]bool) string {
	if m.Annotations[AnnotationPrune] == "disabled" {
		return AnnotationPrune + ": disabled"
	}
	if m.Annotations[builder.AnnotationRetain] == "true" {
		return builder.AnnotationRetain
	}
	if g.Group == "" && g.Kind == "PersistentVolumeClaim" {
		if _, ok := m.Labels[builder.LabelPyJob]; ok || claimsInUse[g.Namespace+"/"+g.Name] {
			return "holds training data of a PyJob"
		}
	}
	if isNamespace(g.GVK()) && nsInUse[g.Name] {
		return "still holds objects from Git"
	}
	return ""
}

// claimsInUse lists the claims PyJobs name as dataset or output, when a
// claim is about to be pruned.
func (e *Engine) claimsInUse(ctx context.Context, gone []Entry) (map[string]bool, error) {
	need := false
	for _, g := range gone {
		if g.Group == "" && g.Kind == "PersistentVolumeClaim" {
			need = true
		}
	}
	out := map[string]bool{}
	if !need {
		return out, nil
	}
	var pjs trainingv1alpha1.PyJobList
	if err := e.Client.List(ctx, &pjs); err != nil {
		return nil, fmt.Errorf("list PyJobs to protect their claims: %w", err)
	}
	for _, pj := range pjs.Items {
		if s := pj.Spec.Storage; s != nil {
			if s.Dataset != nil {
				out[pj.Namespace+"/"+s.Dataset.ClaimName] = true
			}
			if s.Output != nil {
				name := s.Output.ClaimName
				if name == "" {
					name = builder.OutputClaimName(&pj)
				}
				out[pj.Namespace+"/"+name] = true
			}
		}
	}
	return out, nil
}

// PruneAll deletes everything the sync applied, as a prune would (objects
// marked to stay, and claims holding training data, stay), then saves the
// inventory of what is left: for a sync that is being removed.
func (e *Engine) PruneAll(ctx context.Context) (res Result, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	store := e.inventory()
	inv, cm, err := store.Load(ctx)
	if err != nil || cm == nil {
		return res, err
	}
	gone := make([]Entry, 0, len(inv.Entries))
	for _, en := range inv.Entries {
		gone = append(gone, en)
	}
	// Namespaces last: those still holding objects are kept by prune.
	sort.Slice(gone, func(i, j int) bool {
		if a, b := isNamespace(gone[i].GVK()), isNamespace(gone[j].GVK()); a != b {
			return b
		}
		return gone[i].Key() < gone[j].Key()
	})
	err = e.prune(ctx, gone, inv, &res)
	if _, serr := store.Save(ctx, inv, cm); serr != nil {
		err = errors.Join(err, fmt.Errorf("save inventory: %w", serr))
	}
	return res, err
}
