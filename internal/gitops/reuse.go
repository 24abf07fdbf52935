// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainops/trainops/render"
)

// A push of one file to a repository of thousands changes one file's
// objects. The engine remembers what its last render made of each file
// (memo): each object's identity and hash, not the object. The next render
// with the same settings parses, checks and prepares only the files whose
// bytes (and, in a kustomization, whose tree) changed, and the sync holds
// the others as those records: far less to allocate and to keep while the
// revision is planned and applied. An unchanged file's object that the
// plan finds changed after all (the cluster drifted) is parsed again
// before it is applied (materialize). Anything unusual (a problem in the
// revision, a kind whose mapping moved, an empty revision) renders the
// whole revision instead, so every message is a whole render's.

// memo is what the engine's last render with settings made of each file,
// by file.
type memo struct {
	settings string
	files    map[string]memoFile
}

// memoFile is what one file rendered to.
type memoFile struct {
	key   string    // its render key (render.Reuse)
	kinds []string  // the kinds of its objects, shared by files of one kind
	recs  []memoRec // its objects as checked and prepared
}

// memoRec is what the memo keeps of one object: what a plan compares.
// Its group, version, kind and namespace are shared with every other
// record of the memo that has them.
type memoRec struct {
	gvk             schema.GroupVersionKind
	namespace, name string
	hash            string
}

// desired is the record as the sync's object, without obj.
func (r memoRec) desired(file string) desired {
	return desired{file: file, gvk: r.gvk, namespace: r.namespace, name: r.name, hash: r.hash,
		key: Entry{Group: r.gvk.Group, Kind: r.gvk.Kind, Namespace: r.namespace, Name: r.name}.Key()}
}

// renderChecked renders the revision and checks every object (see check):
// the objects to apply, or why the revision is refused; reused is how
// many of them the memo gave.
func (e *Engine) renderChecked(ctx context.Context, dir, revision, settings string) (want []*desired, reused int, err error) {
	if want, reused, ok := e.renderReusing(ctx, dir, settings, nil); ok {
		return want, reused, nil
	}
	objs, want, err := e.renderWhole(ctx, dir, revision)
	if err != nil {
		return nil, 0, err
	}
	e.remember(settings, objs, want, nil)
	return want, 0, nil
}

// renderWhole renders and checks every file of the revision; each object
// has its file's key, for the memo.
func (e *Engine) renderWhole(ctx context.Context, dir, revision string) ([]render.Object, []*desired, error) {
	objs, rerr := render.RenderReusing(ctx, dir, e.Opts.Path, e.Opts.Render, func(string, string) ([]string, bool) { return nil, false })
	if rerr != nil {
		var re *render.Error
		p := Problem{Message: rerr.Error()}
		if errors.As(rerr, &re) {
			p = Problem{File: re.File, Message: re.Err.Error()}
		}
		return nil, nil, &SyncError{Reason: ReasonRenderFailed, Revision: revision, Problems: []Problem{p}}
	}
	want, err := e.validate(objs, revision)
	if err != nil {
		return nil, nil, err
	}
	if len(want) == 0 && !e.Opts.AllowEmpty {
		return nil, nil, &SyncError{Reason: ReasonEmptyRender, Revision: revision, Problems: []Problem{{File: e.Opts.Path, Message: "the revision renders no objects; nothing was applied or pruned (set allowEmpty to prune everything)"}}}
	}
	return objs, want, nil
}

// renderReusing renders the revision, taking from the memo every file it
// holds unchanged (but those in need), and checks what it parsed. With
// need, only the objects of the files in need come back, and the memo is
// left as it is. ok is false when the memo cannot serve this render, or
// the render or its checks found anything wrong: the caller renders the
// whole revision.
func (e *Engine) renderReusing(ctx context.Context, dir, settings string, need map[string]bool) (want []*desired, reused int, ok bool) {
	m := e.memo
	if m == nil || m.settings != settings {
		return nil, 0, false
	}
	objs, err := render.RenderReusing(ctx, dir, e.Opts.Path, e.Opts.Render, func(file, key string) ([]string, bool) {
		f, ok := m.files[file]
		if !ok || f.key != key || need[file] {
			return nil, false
		}
		return f.kinds, true
	})
	if err != nil {
		return nil, 0, false
	}
	var parsed []render.Object
	keep := map[string]memoFile{}
	var kept []string // keep's files, in the render's order
	for _, o := range objs {
		if !o.Reused {
			parsed = append(parsed, o)
		} else if _, dup := keep[o.File]; !dup {
			keep[o.File] = m.files[o.File]
			kept = append(kept, o.File)
		}
	}
	if want, err = e.validate(parsed, ""); err != nil {
		return nil, 0, false
	}
	if need != nil {
		// Only the needed files' objects are wanted, and the others are
		// as the render before this one found them.
		return want, 0, true
	}
	seen := make(map[string]bool, len(objs))
	for _, d := range want {
		seen[d.key] = true
	}
	mappings := map[schema.GroupVersionKind]*meta.RESTMapping{}
	for _, file := range kept {
		for _, rec := range keep[file].recs {
			r := rec.desired(file)
			mapping, known := mappings[r.gvk]
			if !known {
				if mapping, err = e.Mapper.RESTMapping(r.gvk.GroupKind(), r.gvk.Version); err != nil {
					return nil, 0, false
				}
				mappings[r.gvk] = mapping
			}
			if namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace; namespaced != (r.namespace != "") || seen[r.key] {
				// The kind's scope changed, or another file now defines
				// the object too: the whole render says so.
				return nil, 0, false
			}
			seen[r.key] = true
			d := r
			d.mapping = mapping
			want = append(want, &d)
			reused++
		}
	}
	if len(want) == 0 {
		return nil, 0, false
	}
	e.remember(settings, objs, want, keep)
	return want, reused, true
}

// remember makes the memo what this render made of each file: the
// records of the objects of each file it parsed (but those without a key:
// files krusty built whole, and a file built through two kustomizations)
// and, as they were, the files it took from the memo (keep).
func (e *Engine) remember(settings string, objs []render.Object, want []*desired, keep map[string]memoFile) {
	keys := map[string]string{}
	for _, o := range objs {
		if o.Key != "" && !o.Reused {
			keys[o.File] = o.Key
		}
	}
	files := make(map[string]memoFile, len(keys)+len(keep))
	once := sharedStrings{}
	kindSets := map[string][]string{}
	for _, d := range want {
		key, ok := keys[d.file]
		if !ok || d.obj == nil {
			continue
		}
		f := files[d.file]
		f.key = key
		gvk := schema.GroupVersionKind{Group: once.of(d.gvk.Group), Version: once.of(d.gvk.Version), Kind: once.of(d.gvk.Kind)}
		f.recs = append(f.recs, memoRec{gvk: gvk, namespace: once.of(d.namespace), name: d.name, hash: d.hash})
		if !slices.Contains(f.kinds, gvk.Kind) {
			f.kinds = append(f.kinds, gvk.Kind)
		}
		files[d.file] = f
	}
	for file, f := range files {
		// One slice for every file of the same kinds.
		set := strings.Join(f.kinds, ",")
		if k, ok := kindSets[set]; ok {
			f.kinds = k
		} else {
			kindSets[set] = f.kinds
		}
		files[file] = f
	}
	for file, f := range keep {
		files[file] = f
	}
	e.memo = &memo{settings: settings, files: files}
}

// materialize gives each changed object the memo gave (without its
// object) its object, parsing those objects' files again: the plan found
// them changed in the cluster.
func (e *Engine) materialize(ctx context.Context, dir, revision, settings string, changed []*desired) error {
	need := map[string]bool{}
	for _, d := range changed {
		if d.obj == nil {
			need[d.file] = true
		}
	}
	if len(need) == 0 {
		return nil
	}
	parsed, _, ok := e.renderReusing(ctx, dir, settings, need)
	if !ok {
		var err error
		if _, parsed, err = e.renderWhole(ctx, dir, revision); err != nil {
			return err
		}
	}
	byKey := make(map[string]*desired, len(parsed))
	for _, d := range parsed {
		if d.obj != nil {
			byKey[d.key] = d
		}
	}
	for _, d := range changed {
		if d.obj != nil {
			continue
		}
		full, ok := byKey[d.key]
		if !ok || full.hash != d.hash {
			return fmt.Errorf("%s in %s changed while the revision was synced", d.id(), d.file)
		}
		d.obj, d.mapping = full.obj, full.mapping
	}
	return nil
}
