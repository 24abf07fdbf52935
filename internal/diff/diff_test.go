// SPDX-License-Identifier: Apache-2.0

package diff

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainops/trainops/internal/capacity"
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

// TestCapacityPlanInEveryOutput: the plan's verdicts and the queues'
// numbers are in the text, the JSON and the pull-request comment, a Job
// that never fits set apart, and a pipe in a message cannot break the
// Markdown table.
func TestCapacityPlanInEveryOutput(t *testing.T) {
	r := &Report{Changes: []Change{{Action: Create, Kind: "PyJob", Namespace: "team-a", Name: "gpt"}}, Summary: Summary{Create: 1}}
	r.Capacity = &capacity.Plan{Source: "the cluster",
		ClusterQueues: []capacity.ClusterQueue{{Name: "research", Flavor: []capacity.Flavor{{Name: "a100", Resource: "nvidia.com/gpu", Quota: 16, InUse: 8}}, Pending: 2}},
		Jobs: []capacity.Verdict{
			{PyJob: "team-a/gpt", Queue: "team", Workers: 3, PerWorker: 8, GPUs: 24, Resource: "nvidia.com/gpu", Result: capacity.NeverFits, Why: "asks 24 | more than 16"},
		}}
	var text, js, md bytes.Buffer
	if err := r.WriteText(&text, false); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"text": text.String(), "json": js.String(), "markdown": md.String()} {
		for _, want := range []string{"team-a/gpt", "research", "asks 24"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s output does not say %q:\n%s", name, want, out)
			}
		}
	}
	if !strings.Contains(text.String(), "quota 16, in use 8") || !strings.Contains(md.String(), "**NEVER FITS**") || !strings.Contains(md.String(), `asks 24 \| more`) {
		t.Errorf("text:\n%s\nmarkdown:\n%s", text.String(), md.String())
	}
	if !strings.Contains(js.String(), `"result": "never fits"`) {
		t.Errorf("json:\n%s", js.String())
	}
}
