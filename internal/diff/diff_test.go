// SPDX-License-Identifier: Apache-2.0

package diff

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainops/trainops/internal/offline"
)

func secret(data map[string]any, stringData map[string]any) offline.Item {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "creds", "namespace": "ml"}}}
	if data != nil {
		u.Object["data"] = data
	}
	if stringData != nil {
		u.Object["stringData"] = stringData
	}
	return offline.Item{Object: u, File: "secret.yaml"}
}

func TestSecretDataIsMasked(t *testing.T) {
	base := []offline.Item{secret(map[string]any{"token": "b2xkLXNlY3JldA=="}, map[string]any{"password": "old-password"})}
	head := []offline.Item{secret(map[string]any{"token": "bmV3LXNlY3JldA=="}, map[string]any{"password": "new-password"})}
	r := Compare(base, head, nil, nil)
	if r.Summary.Update != 1 {
		t.Fatalf("summary %+v, want the changed Secret as an update", r.Summary)
	}
	var out bytes.Buffer
	for _, write := range []func() error{
		func() error { return r.WriteText(&out, false) },
		func() error { return r.WriteJSON(&out) },
		func() error { return r.WriteMarkdown(&out) },
	} {
		if err := write(); err != nil {
			t.Fatal(err)
		}
	}
	for _, secretValue := range []string{"b2xkLXNlY3JldA==", "bmV3LXNlY3JldA==", "old-password", "new-password"} {
		if strings.Contains(out.String(), secretValue) {
			t.Fatalf("diff output shows secret data %q:\n%s", secretValue, out.String())
		}
	}
	created := Compare(nil, head, nil, nil)
	out.Reset()
	_ = created.WriteJSON(&out)
	if strings.Contains(out.String(), "new-password") || strings.Contains(out.String(), "bmV3LXNlY3JldA==") {
		t.Fatalf("a created Secret's data is shown:\n%s", out.String())
	}
}

func TestUnchangedObjectsAreNotReported(t *testing.T) {
	it := secret(map[string]any{"a": "eA=="}, nil)
	it.Object.SetKind("ConfigMap")
	r := Compare([]offline.Item{it}, []offline.Item{{Object: it.Object.DeepCopy(), File: it.File}}, nil, nil)
	if !r.Empty() {
		t.Fatalf("changes %+v for identical revisions", r.Changes)
	}
}
