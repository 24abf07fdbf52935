package render

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/resource"
)

// Cache keeps what renders made of each file, so a render of a second
// revision parses and transforms only the files that changed: for one
// process that renders two revisions of a repository (trainops diff). It
// keeps each file's objects as rendered, by the file's key (see Reuse: the
// file's bytes and all a kustomization does to them), and what was parsed
// of each file, by its bytes, for the trees krusty builds. Each render
// gets copies: what it makes of them is its own. The nil Cache keeps
// nothing. Safe for concurrent use.
type Cache struct {
	plain sync.Map // string(bytes) → []*unstructured.Unstructured
	kusto sync.Map // string(bytes) → []*resource.Resource
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

// fill keeps copies of what each file of objs with a key rendered to, and
// returns objs as a render without c gives them: each Reused object
// replaced by copies of what its key kept, and no keys.
func (c *Cache) fill(objs []Object) []Object {
	out := make([]Object, 0, len(objs))
	made := map[string][]*unstructured.Unstructured{}
	for _, o := range objs {
		if !o.Reused {
			if o.Key != "" {
				made[o.Key] = append(made[o.Key], o.DeepCopy())
			}
			out = append(out, Object{Unstructured: o.Unstructured, File: o.File})
			continue
		}
		kept, _ := c.built.Load(o.Key)
		for _, u := range kept.([]*unstructured.Unstructured) {
			out = append(out, Object{Unstructured: u.DeepCopy(), File: o.File})
		}
	}
	for k, us := range made {
		c.built.Store(k, us)
	}
	return out
}

// parse is Parse, through c.
func (c *Cache) parse(raw []byte) ([]*unstructured.Unstructured, error) {
	if c == nil {
		return Parse(raw)
	}
	if kept, ok := c.plain.Load(string(raw)); ok {
		return copyObjects(kept.([]*unstructured.Unstructured)), nil
	}
	us, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	c.plain.Store(string(raw), us)
	return copyObjects(us), nil
}

func copyObjects(us []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(us))
	for i, u := range us {
		out[i] = u.DeepCopy()
	}
	return out
}

// resources are copies of the resources kept for a file of these bytes.
func (c *Cache) resources(data []byte) ([]*resource.Resource, bool) {
	if c == nil {
		return nil, false
	}
	kept, ok := c.kusto.Load(string(data))
	if !ok {
		return nil, false
	}
	return copyResources(kept.([]*resource.Resource)), true
}

// keepResources keeps copies of rs, parsed from a file of these bytes.
func (c *Cache) keepResources(data []byte, rs []*resource.Resource) {
	if c != nil {
		c.kusto.Store(string(data), copyResources(rs))
	}
}

func copyResources(rs []*resource.Resource) []*resource.Resource {
	out := make([]*resource.Resource, len(rs))
	for i, r := range rs {
		out[i] = r.DeepCopy()
	}
	return out
}
