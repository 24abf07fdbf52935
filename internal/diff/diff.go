// SPDX-License-Identifier: Apache-2.0

// Package diff compares two expansions of a training-config repository (or
// one against a cluster) and reports every object that would be created,
// updated or deleted, children included, as text, JSON or Markdown.
package diff

import (
	"fmt"
	"sort"
	"strings"

	"github.com/fluxcd/pkg/ssa"
	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/internal/capacity"
	"github.com/trainops/trainops/internal/decrypt"
	"github.com/trainops/trainops/internal/offline"
)

// Actions.
const (
	Create = "create"
	Update = "update"
	Delete = "delete"
)

// Change is one object's change. The JSON fields are the stable output.
type Change struct {
	Action     string `json:"action"`
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Owner      string `json:"owner"`
	Diff       string `json:"diff"`
	// Refused says why the API server will refuse the change, with the fix.
	Refused string `json:"-"`
	File    string `json:"-"`
}

// ID is "Kind namespace/name".
func (c Change) ID() string {
	if c.Namespace == "" {
		return c.Kind + " " + c.Name
	}
	return c.Kind + " " + c.Namespace + "/" + c.Name
}

// Summary counts changes by action.
type Summary struct {
	Create int `json:"create"`
	Update int `json:"update"`
	Delete int `json:"delete"`
}

// Report is the result of a diff.
type Report struct {
	Changes []Change `json:"changes"`
	Summary Summary  `json:"summary"`
	// Warnings are problems the merge would meet (prune budget, refused
	// changes), for people.
	Warnings []string `json:"-"`
	// Capacity plans the change's Jobs against the queues' quota and the
	// nodes' GPUs; nil when there is none to plan.
	Capacity *capacity.Plan `json:"capacity,omitempty"`
}

// MarkRefused flags the change of the object with key (offline.Key) as one
// the API server refuses, or adds it as an update when it is not there.
func (r *Report) MarkRefused(obj *unstructured.Unstructured, file, msg string) {
	for i := range r.Changes {
		c := &r.Changes[i]
		if c.Kind == obj.GetKind() && c.Namespace == obj.GetNamespace() && c.Name == obj.GetName() && c.APIVersion == obj.GetAPIVersion() {
			c.Refused, c.Diff = msg, "# REFUSED: "+msg+"\n"+c.Diff
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s will be refused: %s", c.ID(), msg))
			return
		}
	}
	r.add(Update, offline.Item{Object: obj, File: file}, obj, obj, msg)
	r.Warnings = append(r.Warnings, fmt.Sprintf("%s will be refused: %s", r.Changes[len(r.Changes)-1].ID(), msg))
}

// Warn adds the warnings (offline.Warnings) of the objects the diff
// creates or updates: an object the change leaves alone is not the
// change's to warn about.
func (r *Report) Warn(warnings []offline.Problem) {
	changed := map[string]bool{}
	for _, c := range r.Changes {
		if c.Action != Delete && c.Owner == "" {
			changed[c.File+"\x00"+c.ID()] = true
		}
	}
	for _, w := range warnings {
		if changed[w.File+"\x00"+w.Object] {
			r.Warnings = append(r.Warnings, w.String())
		}
	}
}

// Empty reports whether nothing would change.
func (r *Report) Empty() bool { return len(r.Changes) == 0 }

// UpdateChecker says whether the API server would accept changing old into
// obj; offline.Loader.CheckUpdate is one.
type UpdateChecker func(obj, old *unstructured.Unstructured) error

// Budget says whether deleting n of total objects from Git fits the prune
// budget.
type Budget func(n, total int) bool

// Compare diffs base against head.
func Compare(base, head []offline.Item, check UpdateChecker, budget Budget) *Report {
	index := func(items []offline.Item) map[string]offline.Item {
		m := make(map[string]offline.Item, len(items))
		for _, it := range items {
			m[offline.Key(it.Object)] = it
		}
		return m
	}
	b, h := index(base), index(head)
	r := &Report{}
	gitObjects, gitDeletes := 0, 0
	for _, it := range base {
		if it.Owner == "" {
			gitObjects++
		}
	}
	for _, it := range head {
		old, existed := b[offline.Key(it.Object)]
		switch {
		case !existed:
			r.add(Create, it, nil, it.Object, "")
		case equality.Semantic.DeepEqual(old.Object.Object, it.Object.Object):
			continue
		default:
			text := unified(old.Object, it.Object)
			if text == "" {
				continue
			}
			refused := ""
			if check != nil && it.Owner == "" {
				if err := check(it.Object, old.Object); err != nil {
					refused = err.Error()
				}
			}
			r.add(Update, it, old.Object, it.Object, refused)
		}
	}
	for _, it := range base {
		if _, ok := h[offline.Key(it.Object)]; !ok {
			r.add(Delete, it, it.Object, nil, "")
			if it.Owner == "" {
				gitDeletes++
			}
		}
	}
	sort.SliceStable(r.Changes, func(i, j int) bool {
		a, c := r.Changes[i], r.Changes[j]
		if a.Owner != c.Owner {
			// Custom resources first, each followed by its children.
			ao, co := a.Owner, c.Owner
			if ao == "" {
				ao = ownerKey(a)
			}
			if co == "" {
				co = ownerKey(c)
			}
			if ao != co {
				return ao < co
			}
			return a.Owner == ""
		}
		return changeKey(a) < changeKey(c)
	})
	for _, c := range r.Changes {
		if c.Refused != "" {
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s will be refused: %s", c.ID(), c.Refused))
		}
	}
	if budget != nil && gitDeletes > 0 && !budget(gitDeletes, gitObjects) {
		r.Warnings = append(r.Warnings, fmt.Sprintf("deletes %d of %d objects from Git: past the prune budget, the sync will refuse the revision", gitDeletes, gitObjects))
	}
	return r
}

func ownerKey(c Change) string {
	if c.Namespace == "" {
		return c.Kind + "/" + c.Name
	}
	return c.Kind + "/" + c.Namespace + "/" + c.Name
}

func changeKey(c Change) string { return c.Kind + "/" + c.Namespace + "/" + c.Name }

func (r *Report) add(action string, it offline.Item, old, cur *unstructured.Unstructured, refused string) {
	obj := cur
	if obj == nil {
		obj = old
	}
	text := unified(old, cur)
	if refused != "" {
		text = "# REFUSED: " + refused + "\n" + text
	}
	r.Changes = append(r.Changes, Change{
		Action: action, APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Owner: it.Owner, Diff: text, Refused: refused, File: it.File,
	})
	switch action {
	case Create:
		r.Summary.Create++
	case Update:
		r.Summary.Update++
	case Delete:
		r.Summary.Delete++
	}
}

// unified is a unified diff of two objects' YAML ("" when equal). The data
// of a Secret, or of any SOPS-encrypted object, is masked, showing only
// whether a value changed.
func unified(old, cur *unstructured.Unstructured) string {
	if old != nil {
		old = old.DeepCopy()
	}
	if cur != nil {
		cur = cur.DeepCopy()
	}
	if masked(old) || masked(cur) {
		a, b := old, cur
		if a == nil {
			a = &unstructured.Unstructured{Object: map[string]any{}}
		}
		if b == nil {
			b = &unstructured.Unstructured{Object: map[string]any{}}
		}
		maskStringData(a)
		maskStringData(b)
		_ = ssa.SanitizeUnstructuredData(a, b)
	}
	toLines := func(u *unstructured.Unstructured) []string {
		if u == nil {
			return nil
		}
		b, _ := yaml.Marshal(u.Object)
		return difflib.SplitLines(string(b))
	}
	a, b := toLines(old), toLines(cur)
	if strings.Join(a, "") == strings.Join(b, "") {
		return ""
	}
	text, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: a, B: b, FromFile: "before", ToFile: "after", Context: 3})
	return text
}

// masked says u's data is shown masked: a Secret's, or an encrypted
// object's (its live counterpart holds the values in the clear).
func masked(u *unstructured.Unstructured) bool {
	return u != nil && (u.GetKind() == "Secret" || decrypt.Encrypted(u.Object))
}

// maskStringData folds stringData into data so it is masked the same way.
func maskStringData(u *unstructured.Unstructured) {
	sd, ok, _ := unstructured.NestedStringMap(u.Object, "stringData")
	if !ok {
		return
	}
	data, _, _ := unstructured.NestedMap(u.Object, "data")
	if data == nil {
		data = map[string]any{}
	}
	for k, v := range sd {
		data[k] = v
	}
	unstructured.RemoveNestedField(u.Object, "stringData")
	_ = unstructured.SetNestedMap(u.Object, data, "data")
}
