// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/trainops/trainops/internal/builder"
)

// The plan reads each list item into a liveObject; what it compares must
// be what the whole decoded item said, whatever order the API server
// writes the list's keys in and however its JSON encoder escapes.
func TestDecodeListReadsWhatThePlanCompares(t *testing.T) {
	own := metav1.ManagedFieldsEntry{Manager: builder.FieldManager, Operation: metav1.ManagedFieldsOperationApply,
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:env":{"f:A<B>&C":{}}}}`)}}
	other := metav1.ManagedFieldsEntry{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}}
	status := own
	status.Subresource, status.FieldsV1 = "status", &metav1.FieldsV1{Raw: []byte(`{"f:status":{}}`)}
	now := metav1.NewTime(time.Now())
	list := metav1.PartialObjectMetadataList{Items: []metav1.PartialObjectMetadata{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "a", Annotations: map[string]string{builder.AnnotationAppliedHash: "h1", "x": "y"},
			ManagedFields: []metav1.ManagedFieldsEntry{other, status, own}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", DeletionTimestamp: &now, ManagedFields: []metav1.ManagedFieldsEntry{other}}},
	}}
	list.Continue = "abc"
	// The API server writes JSON with encoding/json's Encoder, which
	// escapes <, > and &; an apply's answer (protobuf) holds them as they are.
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(list); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `\u0026`) {
		t.Fatalf("the encoded list escapes nothing, so the test shows nothing: %s", buf.String())
	}
	// Items first and metadata last, too.
	var generic map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &generic); err != nil {
		t.Fatal(err)
	}
	reordered := `{"items":` + string(generic["items"]) + `,"kind":"PartialObjectMetadataList","metadata":` + string(generic["metadata"]) + `}`

	// And as protobuf, in the envelope the API server puts it in.
	protoList, err := list.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	envelope := func(kind string) []byte {
		u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: kind}, Raw: protoList}
		b, err := u.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte("k8s\x00"), b...)
	}
	decoders := map[string]func(func(liveObject)) error{
		"JSON as encoded":  func(fn func(liveObject)) error { return decodeList(strings.NewReader(buf.String()), fn) },
		"JSON items first": func(fn func(liveObject)) error { return decodeList(strings.NewReader(reordered), fn) },
		"protobuf": func(fn func(liveObject)) error {
			return decodeListProto(bufio.NewReader(bytes.NewReader(envelope("PartialObjectMetadataList"))), fn)
		},
	}
	want := []liveObject{
		{namespace: "ml", name: "a", hash: "h1", fields: managedFieldsHash([]metav1.ManagedFieldsEntry{own})},
		{name: "b", deleting: true},
	}
	if want[0].fields == "" || want[0].fields == builder.FieldsHash(other.FieldsV1.Raw) {
		t.Fatalf("the expected hash %q does not single out trainops's entry", want[0].fields)
	}
	for name, decode := range decoders {
		var got []liveObject
		if err := decode(func(o liveObject) { got = append(got, o) }); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: read %d items, want %d: %+v", name, len(got), len(want), got)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: item %d read as %+v, want %+v", name, i, got[i], want[i])
			}
		}
	}
	n := 0
	if err := decodeListProto(bufio.NewReader(bytes.NewReader(envelope("ConfigMapList"))), func(liveObject) { n++ }); err == nil || n != 0 {
		t.Errorf("a protobuf answer of another kind: %d items read, error %v", n, err)
	}
	// An answer cut short, within an item or between two, is an error, not
	// a shorter list: the plan would prune what it did not see.
	whole := envelope("PartialObjectMetadataList")
	// The envelope ends with its two empty strings, 2 bytes each.
	for cut := len(whole) - 5; cut > len(whole)-400 && cut > 0; cut-- {
		if err := decodeListProto(bufio.NewReader(bytes.NewReader(whole[:cut])), func(liveObject) {}); err == nil {
			t.Fatalf("the answer cut at %d of %d bytes read without an error", cut, len(whole))
		}
	}
}

func TestDecodeListRefusesWhatIsNotAList(t *testing.T) {
	var n int
	count := func(liveObject) { n++ }
	if err := decodeList(strings.NewReader(`{"kind":"PartialObjectMetadataList","items":null}`), count); err != nil || n != 0 {
		t.Fatalf("a list of no items: %d items, %v", n, err)
	}
	for _, raw := range []string{``, `[]`, `{"items":{}}`, `{"items":[{"metadata":{"name":1}}]}`, `{"items":[{}`} {
		n = 0
		if err := decodeList(strings.NewReader(raw), count); err == nil {
			t.Errorf("%q read without an error (%d items)", raw, n)
		}
	}
	for _, raw := range []string{"", "{}", "k8s\x00\x12\xff"} {
		n = 0
		if err := decodeListProto(bufio.NewReader(strings.NewReader(raw)), count); err == nil || n != 0 {
			t.Errorf("%q as protobuf: %d items, error %v", raw, n, err)
		}
	}
}
