// SPDX-License-Identifier: Apache-2.0

package render

import (
	"fmt"
	"strconv"

	yamlv2 "go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainops/trainops/render/internal/fast"
)

// decodeDirect decodes one YAML document into the object sigs.k8s.io/yaml's
// YAMLToJSON and unstructured's JSON decoding make of it, without the JSON
// in between: the same YAML parser, the same keys, and numbers as
// fast.JSONValues makes them. u is nil for a null document. ok is false for
// anything it does not mirror exactly, an error included: the caller then
// takes the JSON path, and its messages.
func decodeDirect(doc []byte) (u *unstructured.Unstructured, ok bool) {
	var obj any
	if yamlv2.Unmarshal(doc, &obj) != nil {
		return nil, false
	}
	if obj == nil {
		return nil, true
	}
	v, err := jsonable(obj)
	if err != nil {
		return nil, false
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		return nil, false
	}
	if _, err := fast.JSONValues(m); err != nil {
		return nil, false
	}
	u = &unstructured.Unstructured{Object: m}
	if u.GroupVersionKind().Kind == "" {
		return nil, false
	}
	return u, true
}

// jsonable is sigs.k8s.io/yaml's convertToJSONableObject without a
// target: every map's keys made strings as it makes them, lists changed in
// place (the YAML decoder makes each alias a value of its own, so nothing
// is shared; TestDirectDecodeMatchesJSON holds it).
func jsonable(v any) (any, error) {
	switch x := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			var key string
			switch kk := k.(type) {
			case string:
				key = kk
			case int:
				key = strconv.Itoa(kk)
			case int64:
				key = strconv.FormatInt(kk, 10)
			case float64:
				key = strconv.FormatFloat(kk, 'g', -1, 32)
				switch key {
				case "+Inf":
					key = ".inf"
				case "-Inf":
					key = "-.inf"
				case "NaN":
					key = ".nan"
				}
			case bool:
				key = strconv.FormatBool(kk)
			default:
				return nil, fmt.Errorf("a map key of type %T", k)
			}
			if _, twice := m[key]; twice {
				// Two keys spell the same string (0 and .0): which one
				// JSON keeps is for the JSON path to say.
				return nil, fmt.Errorf("two map keys make %q", key)
			}
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			m[key] = c
		}
		return m, nil
	case []any:
		for i, e := range x {
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
		return x, nil
	}
	return v, nil
}
