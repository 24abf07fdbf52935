// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"maps"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
)

func inventoryOf(t *testing.T, raw []byte) *corev1.ConfigMap {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return &corev1.ConfigMap{BinaryData: map[string][]byte{keyEntries: buf.Bytes()}}
}

// The inventory's entries read back as written, by key, each distinct
// group, version, kind and namespace kept once; a cut or garbled array is
// an error, not fewer entries.
func TestInventoryEntriesReadBack(t *testing.T) {
	entries := []Entry{
		{Group: "training.trainops.dev", Version: "v1alpha1", Kind: "PyJob", Namespace: "team-a", Name: "a", Hash: "1", Fields: "f1"},
		{Group: "training.trainops.dev", Version: "v1alpha1", Kind: "PyJob", Namespace: "team-a", Name: "b", Hash: "2"},
		{Version: "v1", Kind: "Namespace", Name: "team-a", Hash: "3"},
	}
	raw, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := DecodeInventory(inventoryOf(t, raw))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Entry{}
	for _, e := range entries {
		want[e.Key()] = e
	}
	if !maps.Equal(inv.Entries, want) {
		t.Fatalf("entries %v, want %v", inv.Entries, want)
	}
	a, b := inv.Entries[entries[0].Key()], inv.Entries[entries[1].Key()]
	if unsafe.StringData(a.Kind) != unsafe.StringData(b.Kind) || unsafe.StringData(a.Namespace) != unsafe.StringData(b.Namespace) {
		t.Error("two entries of one kind and namespace hold copies of their own")
	}
	for _, bad := range [][]byte{raw[:len(raw)-1], raw[:len(raw)/2], []byte(`{"g":"x"}`), []byte(`[{"n":1}]`)} {
		if inv, err := DecodeInventory(inventoryOf(t, bad)); err == nil {
			t.Errorf("%q read as %d entries without an error", bad, len(inv.Entries))
		}
	}
}
