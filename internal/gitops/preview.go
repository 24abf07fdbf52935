// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Preview is what a sync of a checkout would do, worked out by the sync's
// own steps (render, check, plan, prune set) without changing the cluster.
// The live diff shows it.
type Preview struct {
	// Apply are the objects that differ from what trainops last applied,
	// or that it never applied, each exactly as the sync would send it.
	Apply []PreviewObject
	// Prune are the objects the sync would delete, budget or not.
	Prune []Entry
	// Unchanged counts the objects exactly as trainops last applied them.
	Unchanged int
	// Recorded is the number of objects the inventory records: the whole
	// the prune budget is a share of.
	Recorded int
	// OverBudget says Prune is past the prune budget: the sync would
	// refuse the revision.
	OverBudget bool
}

// PreviewObject is one object a sync would apply, and its file.
type PreviewObject struct {
	Object *unstructured.Unstructured
	File   string
}

// Preview renders and checks dir as Sync would, and plans it against the
// cluster and the inventory. A revision Sync would refuse for its content
// returns the same *SyncError; past the prune budget is not an error here,
// so the preview can show what would be deleted. SOPS-encrypted objects
// stay encrypted: a preview never holds their values.
func (e *Engine) Preview(ctx context.Context, dir string) (*Preview, error) {
	if e.Mapper == nil {
		return nil, errors.New("sync engine: Mapper must be set")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.previewing = true
	defer func() { e.previewing = false }()
	inv, _, err := e.inventory().Load(ctx)
	if err != nil {
		return nil, err
	}
	_, want, err := e.renderWhole(ctx, dir, "")
	if err != nil {
		return nil, err
	}
	changed, unchanged, _, err := e.plan(ctx, want, inv)
	if err != nil {
		return nil, err
	}
	p := &Preview{Unchanged: unchanged}
	if e.Opts.Prune {
		p.Prune = gone(want, inv)
	}
	p.Recorded = len(inv.Entries)
	p.OverBudget = e.overBudget(p.Prune, inv)
	for _, d := range changed {
		p.Apply = append(p.Apply, PreviewObject{Object: d.obj, File: d.file})
	}
	return p, nil
}
