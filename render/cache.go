// SPDX-License-Identifier: Apache-2.0

package render

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Cache keeps what a render made of each file, so a render of a second
// revision parses and transforms only the files that changed: for one
// process that renders two revisions of a repository (trainops diff). It
// keeps each file's objects by the file's key (see Reuse: the file's bytes
// and all a kustomization does to them). A render given a file the cache
// holds gives the very objects the render before gave for it, not copies:
// the two renders share them, so an object the caller changes after one
// render comes changed out of the next, and the objects two revisions
// render the same are one object in both. The nil Cache keeps nothing.
// Safe for concurrent use.
type Cache struct {
	built sync.Map // file key → []*unstructured.Unstructured, as rendered
}

// reuse is the Reuse of a render through c: a file whose key a render
// before kept.
func (c *Cache) reuse(_, key string) ([]string, bool) {
	kept, ok := c.built.Load(key)
	if !ok {
		return nil, false
	}
	var kinds []string
	for _, u := range kept.([]*unstructured.Unstructured) {
		if k := u.GetKind(); !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	return kinds, true
}

// fill keeps what each file of objs with a key rendered to, and returns
// objs as a render without c gives them: each Reused object replaced by
// what its key kept, and no keys; reused says whether any was.
func (c *Cache) fill(objs []Object) (out []Object, reused bool) {
	out = make([]Object, 0, len(objs))
	made := map[string][]*unstructured.Unstructured{}
	for _, o := range objs {
		if !o.Reused {
			if o.Key != "" {
				made[o.Key] = append(made[o.Key], o.Unstructured)
			}
			out = append(out, Object{Unstructured: o.Unstructured, File: o.File})
			continue
		}
		reused = true
		kept, _ := c.built.Load(o.Key)
		for _, u := range kept.([]*unstructured.Unstructured) {
			out = append(out, Object{Unstructured: u, File: o.File})
		}
	}
	for k, us := range made {
		c.built.Store(k, us)
	}
	return out, reused
}
