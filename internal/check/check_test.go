// SPDX-License-Identifier: Apache-2.0

package check_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/crdschema"
	"github.com/trainops/trainops/render"
)

// TestCRDAndItsResourcesInOneRevision: a revision holding a
// CustomResourceDefinition and a resource of its kind (with both kinds
// allowed) is refused with a message that says why and what to do, not
// "unknown kind"; the CustomResourceDefinition alone passes.
func TestCRDAndItsResourcesInOneRevision(t *testing.T) {
	raw, err := render.Parse([]byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: ml-team}
`))
	if err != nil {
		t.Fatal(err)
	}
	objs := []render.Object{{Unstructured: raw[0], File: "crds/widget.yaml"}, {Unstructured: raw[1], File: "widgets/w.yaml"}}
	schemas, err := crdschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	allowed := []schema.GroupKind{{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}, {Group: "example.com", Kind: "Widget"}}
	_, problems := check.Objects(objs, allowed, check.Policy{}, schemas.OfflineMapper(), check.Normalized)
	if len(problems) != 1 {
		t.Fatalf("problems %v, want one, for the Widget", problems)
	}
	p := problems[0]
	if p.File != "widgets/w.yaml" || !strings.Contains(p.Message, "CustomResourceDefinition widgets.example.com in this same revision") || !strings.Contains(p.Message, "install the CustomResourceDefinition first") {
		t.Errorf("problem %s", p)
	}
	if _, problems := check.Objects(objs[:1], allowed, check.Policy{}, schemas.OfflineMapper(), check.Normalized); len(problems) != 0 {
		t.Errorf("the CustomResourceDefinition alone: %v", problems)
	}
}
