package render

import (
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/resource"
)

// Cache keeps what renders parsed of each file, by the file's bytes, so a
// render of a second revision parses only the files that changed: for one
// process that renders two revisions of a repository (trainops diff). Each
// render gets copies: what it makes of them is its own. The nil Cache keeps
// nothing. Safe for concurrent use.
type Cache struct {
	plain sync.Map // string(bytes) → []*unstructured.Unstructured
	kusto sync.Map // string(bytes) → []*resource.Resource
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
