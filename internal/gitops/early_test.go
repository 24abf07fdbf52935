// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"strings"
	"testing"

	"github.com/trainops/trainops/internal/crdschema"
	"github.com/trainops/trainops/render"
)

// TestEarlyValidationRecordsOnlyWhatItValidated: the early validation
// gives the API server's verdict on each new object it reached, and says
// nothing of one a cancelled sync kept it from reaching, which the dry-run
// then validates itself; it never passes an object it did not validate.
func TestEarlyValidationRecordsOnlyWhatItValidated(t *testing.T) {
	schemas, err := crdschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{Schemas: schemas, Opts: Options{Concurrency: 16}}
	want := []*desired{
		earlyDesired(t, "good", 1),
		earlyDesired(t, "negative", -1),
	}
	inv := &Inventory{Entries: map[string]Entry{}}

	c := e.validateEarly(context.Background(), want, inv)
	if err, done := c.result(want[0].key); !done || err != nil {
		t.Errorf("valid PyJob: done %v, err %v; want done and no error", done, err)
	}
	if err, done := c.result(want[1].key); !done || err == nil || !strings.Contains(err.Error(), "gpu cannot be negative") {
		t.Errorf("PyJob with gpu -1: done %v, err %v; want done with the CEL rule's message", done, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c = e.validateEarly(ctx, want, inv)
	for _, d := range want {
		if err, done := c.result(d.key); done {
			t.Errorf("%s after the sync was cancelled: recorded as validated (err %v); want left to the dry-run", d.name, err)
		}
	}
}

func earlyDesired(t *testing.T, name string, gpu int) *desired {
	t.Helper()
	objs, err := render.Parse([]byte(pyjob("team-early", name, "img:1", gpu)))
	if err != nil || len(objs) != 1 {
		t.Fatalf("parse: %v", err)
	}
	u := objs[0]
	return &desired{obj: u, file: name + ".yaml", gvk: u.GroupVersionKind(), namespace: u.GetNamespace(), name: u.GetName(),
		key: Entry{Group: u.GroupVersionKind().Group, Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}.Key()}
}
