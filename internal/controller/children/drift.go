// SPDX-License-Identifier: Apache-2.0

package children

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"reflect"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"github.com/trainops/trainops/internal/builder"
)

// driftCorrected counts children put back after someone changed a field
// trainops manages, by kind.
var driftCorrected = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "trainops_children_drift_corrected_total",
	Help: "Children whose fields managed by trainops were changed by someone else and applied back, by kind.",
}, []string{"kind"})

func init() { metrics.Registry.MustRegister(driftCorrected) }

// drift compares what trainops applies (desired, with its applied-hash
// annotation) with the part of live that trainops's apply owns, and names
// the fields that differ, sorted; none when they match. A field changed
// by someone else (kubectl edit, scale, set image, patch) is no longer
// owned by trainops, so it shows up as missing or different here; a field
// someone else added beside trainops's, such as an extra environment
// variable or a HorizontalPodAutoscaler's replicas when trainops does not
// set them, is not trainops's and is not compared.
func drift(desired *unstructured.Unstructured, live client.Object) ([]string, error) {
	if m, ok := live.(*metav1.PartialObjectMetadata); ok {
		return unownedFields(desired, m)
	}
	owned, err := ownedPart(live)
	if err != nil {
		return nil, err
	}
	want, err := normalized(desired.Object, live)
	if err != nil {
		return nil, err
	}
	var paths []string
	diffPaths("", want, owned, &paths)
	sort.Strings(paths)
	return paths, nil
}

// ownedPart is the part of live trainops owns, normalized like desired.
func ownedPart(live client.Object) (map[string]any, error) {
	if u, ok := live.(*unstructured.Unstructured); ok {
		// A kind without a Go type (the ServiceMonitor): its schema is
		// deduced from the object, every list compared whole.
		var out map[string]any
		if err := managedfields.ExtractInto(u, typed.DeducedParseableType, builder.FieldManager, &out, ""); err != nil {
			return nil, fmt.Errorf("read the fields trainops owns in %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		return normalized(out, live)
	}
	k, ok := kindByType[reflect.TypeOf(live)]
	if !ok || k.extract == nil {
		return nil, fmt.Errorf("%T is not compared for drift", live)
	}
	ac, err := k.extract(live)
	if err != nil {
		return nil, fmt.Errorf("read the fields trainops owns in %s: %w", objectKey(live), err)
	}
	return normalized(ac, live)
}

// normalized passes v through live's Go type and back, so that both sides
// of a comparison spell quantities, integers and empty values alike, and
// keeps only what trainops applies: the spec (or data, rules, ...), and
// the labels, annotations and owner references of the metadata.
func normalized(v any, like client.Object) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if _, ok := like.(*unstructured.Unstructured); ok {
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
	} else {
		t := emptyLike(like)
		if err := json.Unmarshal(b, t); err != nil {
			return nil, err
		}
		if m, err = runtime.DefaultUnstructuredConverter.ToUnstructured(t); err != nil {
			return nil, err
		}
	}
	if m == nil {
		m = map[string]any{}
	}
	delete(m, "status")
	delete(m, "apiVersion")
	delete(m, "kind")
	meta, _ := m["metadata"].(map[string]any)
	kept := map[string]any{}
	for _, k := range []string{"labels", "annotations", "ownerReferences"} {
		if v, ok := meta[k]; ok && v != nil {
			kept[k] = v
		}
	}
	m["metadata"] = kept
	return m, nil
}

// diffPaths appends the paths under prefix where got does not hold what
// want says: the deepest map key that differs, or a list as a whole when
// its length differs. A key only got has is a default the API server
// filled in within a field trainops set (a fieldRef's apiVersion), which
// trainops then owns too: it is not a change.
func diffPaths(prefix string, want, got any, out *[]string) {
	if reflect.DeepEqual(want, got) {
		return
	}
	wm, wok := want.(map[string]any)
	gm, gok := got.(map[string]any)
	if wok && gok {
		for k, w := range wm {
			diffPaths(joinPath(prefix, k), w, gm[k], out)
		}
		return
	}
	wl, wok := want.([]any)
	gl, gok := got.([]any)
	if wok && gok && len(wl) == len(gl) {
		for i := range wl {
			diffPaths(fmt.Sprintf("%s[%d]", prefix, i), wl[i], gl[i], out)
		}
		return
	}
	*out = append(*out, prefix)
}

func joinPath(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// driftMessage names a child and the fields put back, at most five.
func driftMessage(kind, key string, fields []string) string {
	return fmt.Sprintf("%s %s was changed outside trainops (%s): applied back", kind, key, FirstNames(fields))
}

// keepOwnFields is the cache transform of the children trainops compares
// for drift: of the managed fields it keeps only trainops's own apply
// entry, which says what to compare; everything else about them is one
// child's worth of memory, counted in BenchmarkCachedChild.
func keepOwnFields(x any) (any, error) {
	m, ok := x.(metav1.Object)
	if !ok {
		return x, nil
	}
	var own []metav1.ManagedFieldsEntry
	for _, e := range m.GetManagedFields() {
		if builder.OwnApply(e) {
			own = append(own, e)
		}
	}
	m.SetManagedFields(own)
	ShareStrings(m)
	return x, nil
}

// Compared remembers the children found unchanged, by UID, with
// the resourceVersion and applied configuration compared: a PyJob is
// reconciled on each change of its Job's status, and comparing its
// Service again each time, unchanged, would cost the CPU a burst of new
// PyJobs needs. Any change to a child gives it a new resourceVersion, so
// it is compared again. It keeps a hash of the two, not the strings, and
// at most its size of children, the least recently used going first. A
// child it forgot is only compared again. It is safe for concurrent use;
// nil remembers nothing.
type Compared struct {
	seen *lru.Cache // UID → hash of resourceVersion and applied hash
}

// NewCompared remembers up to size children.
func NewCompared(size int) *Compared {
	return &Compared{seen: lru.New(size)}
}

func (c *Compared) key(live client.Object, hash string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(live.GetResourceVersion()))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(hash))
	return h.Sum64()
}

// unchanged reports whether live, as applied with hash, was found
// unchanged before.
func (c *Compared) unchanged(live client.Object, hash string) bool {
	if c == nil {
		return false
	}
	v, ok := c.seen.Get(live.GetUID())
	return ok && v.(uint64) == c.key(live, hash)
}

// remember records live, applied with hash, as found unchanged.
func (c *Compared) remember(live client.Object, hash string) {
	if c != nil {
		c.seen.Add(live.GetUID(), c.key(live, hash))
	}
}

// FirstNames lists names, the first few only, for a message.
func FirstNames(names []string) string {
	const shown = 5
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
}
