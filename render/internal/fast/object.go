// SPDX-License-Identifier: Apache-2.0

package fast

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/resource"
)

// objectOf is the object krusty's build writes for r, as its JSON would
// decode: r's build annotations removed (resource.RemoveBuildAnnotations),
// then r's YAML as RNode.MarshalJSON encodes it and unstructured decodes
// it, without the JSON in between. n is the size of the values it holds,
// for render.maxBytes. Any value whose JSON this does not mirror exactly
// is an error, and krusty builds the tree instead.
func objectOf(r *resource.Resource) (u *unstructured.Unstructured, n int, err error) {
	// RemoveBuildAnnotations reads the annotations as strings and, when
	// there are any, writes back all but the build ones.
	ann := r.GetAnnotations()
	m := map[string]any{}
	if err := r.YNode().Decode(&m); err != nil {
		return nil, 0, err
	}
	md, ok := m["metadata"].(map[string]any)
	if !ok {
		return nil, 0, fmt.Errorf("%w: metadata is not a map", ErrNotFast)
	}
	if len(ann) > 0 {
		kept := make(map[string]any, len(ann))
		for k, v := range ann {
			if !slices.Contains(resource.BuildAnnotations, k) {
				kept[k] = v
			}
		}
		md["annotations"] = kept
	}
	// krusty's output holds the origin annotation of every object, which
	// objectFromKustomize drops, and the annotations with it when no other
	// is left.
	if a, ok := md["annotations"].(map[string]any); ok && len(a) == 0 {
		delete(md, "annotations")
	}
	if n, err = JSONValues(m); err != nil {
		return nil, 0, err
	}
	u = &unstructured.Unstructured{Object: m}
	// As unstructured's decoding, which refuses an object whose apiVersion
	// and kind make no kind.
	if u.GroupVersionKind().Kind == "" {
		return nil, 0, fmt.Errorf("%w: no kind", ErrNotFast)
	}
	return u, n, nil
}

// JSONValues turns, in place, the values YAML decoding made of v into
// those a JSON round trip through unstructured makes: ints become int64,
// and a float becomes an int64 when its JSON is an integer. It returns a
// measure of v's size.
func JSONValues(v any) (int, error) {
	switch x := v.(type) {
	case map[string]any:
		n := 2
		for k, e := range x {
			if !utf8.ValidString(k) {
				return 0, fmt.Errorf("%w: a key is not UTF-8", ErrNotFast)
			}
			c, err := JSONValues(e)
			if err != nil {
				return 0, err
			}
			if j, ok := jsonNumber(e); ok {
				x[k] = j
			}
			n += len(k) + 4 + c
		}
		return n, nil
	case []any:
		n := 2
		for i, e := range x {
			c, err := JSONValues(e)
			if err != nil {
				return 0, err
			}
			if j, ok := jsonNumber(e); ok {
				x[i] = j
			}
			n += c + 1
		}
		return n, nil
	case string:
		if !utf8.ValidString(x) {
			return 0, fmt.Errorf("%w: a string is not UTF-8", ErrNotFast)
		}
		return len(x) + 2, nil
	case nil, bool, int64:
		return 5, nil
	case int:
		return 20, nil
	case uint64:
		return 20, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return 0, fmt.Errorf("%w: a number JSON cannot hold", ErrNotFast)
		}
		return 24, nil
	case time.Time:
		// A timestamp YAML leaves unquoted; its JSON is a string, within
		// the years encoding/json writes.
		if y := x.Year(); y < 0 || y > 9999 {
			return 0, fmt.Errorf("%w: a timestamp JSON cannot hold", ErrNotFast)
		}
		return 40, nil
	}
	return 0, fmt.Errorf("%w: a %T value", ErrNotFast, v)
}

// jsonNumber is number or timestamp v as encoding/json writes it and
// unstructured reads it back (int64 when the text parses as one, else
// float64; a timestamp's RFC 3339 text); ok is false for any other value.
func jsonNumber(v any) (any, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case time.Time:
		return x.Format(time.RFC3339Nano), true
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), true
		}
		return float64(x), true
	case float64:
		// encoding/json's own format: 'f' between 1e-6 and 1e21, else
		// 'e' (never read back as an integer).
		if a := math.Abs(x); a != 0 && (a < 1e-6 || a >= 1e21) {
			return x, true
		}
		if i, err := strconv.ParseInt(strconv.FormatFloat(x, 'f', -1, 64), 10, 64); err == nil {
			return i, true
		}
		return x, true
	}
	return nil, false
}
