package gitops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainops/trainops/internal/builder"
)

// liveObject is what a plan reads of one live object carrying the sync
// label: a few strings, where the decoded list item it comes from held the
// whole metadata, managed fields included.
type liveObject struct {
	namespace, name string
	deleting        bool
	// hash is the object's applied-hash annotation.
	hash string
	// fields hashes trainops's own apply entry of its managed fields (see
	// fieldsHash).
	fields string
}

// metadataListAccept asks the API server for a list of metadata only:
// protobuf, or else JSON. Either is decoded one item at a time from the
// raw answer, never into a whole decoded list.
const metadataListAccept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1," +
	"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

// listLive calls fn with each object of mapping's kind in namespace ns
// ("": all) that carries this sync's label. The API server's answer is
// decoded one item at a time and never held decoded whole: at 5,000
// objects the decoded list was a third of a sync's live heap.
func (e *Engine) listLive(ctx context.Context, mapping *meta.RESTMapping, ns string, fn func(liveObject)) error {
	if e.lists == nil {
		return fmt.Errorf("sync engine: not connected (Connect) to list %s", mapping.Resource.Resource)
	}
	var contentType string
	raw, err := e.lists.Get().AbsPath(listPath(mapping, ns)...).
		Param("labelSelector", LabelSync+"="+e.SyncLabel()).
		SetHeader("Accept", metadataListAccept).
		Do(ctx).ContentType(&contentType).Raw()
	if err != nil {
		return err
	}
	if strings.HasPrefix(contentType, "application/vnd.kubernetes.protobuf") {
		return decodeListProto(raw, fn)
	}
	return decodeList(bytes.NewReader(raw), fn)
}

// listPath is the API path of the list of mapping's resource in ns.
func listPath(mapping *meta.RESTMapping, ns string) []string {
	gv := mapping.Resource.GroupVersion()
	path := []string{"/apis", gv.Group, gv.Version}
	if gv.Group == "" {
		path = []string{"/api", gv.Version}
	}
	if ns != "" && mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		path = append(path, "namespaces", ns)
	}
	return append(path, mapping.Resource.Resource)
}

// liveOf is what a plan compares of an object's metadata.
func liveOf(m *metav1.ObjectMeta) liveObject {
	return liveObject{namespace: m.Namespace, name: m.Name, deleting: m.DeletionTimestamp != nil,
		hash: m.Annotations[builder.AnnotationAppliedHash], fields: managedFieldsHash(m.ManagedFields)}
}

// protoMagic starts every protobuf answer of the API server, before the
// runtime.Unknown envelope that holds the list.
var protoMagic = []byte("k8s\x00")

// decodeListProto reads a PartialObjectMetadataList in the API server's
// protobuf envelope and calls fn with each item, decoding one at a time.
func decodeListProto(b []byte, fn func(liveObject)) error {
	if !bytes.HasPrefix(b, protoMagic) {
		return errors.New("decode list: the answer is not in the API server's protobuf envelope")
	}
	// runtime.Unknown: 1 typeMeta, 2 raw (the list).
	var kind string
	var list []byte
	err := eachField(b[len(protoMagic):], func(n protowire.Number, v []byte) error {
		switch n {
		case 1:
			var tm runtime.TypeMeta
			if err := tm.Unmarshal(v); err != nil {
				return err
			}
			kind = tm.Kind
		case 2:
			list = v
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("decode list: %w", err)
	}
	if kind != "PartialObjectMetadataList" {
		return fmt.Errorf("decode list: the API server answered a %q, not a PartialObjectMetadataList", kind)
	}
	// PartialObjectMetadataList: 1 metadata, 2 items.
	return eachField(list, func(n protowire.Number, v []byte) error {
		if n != 2 {
			return nil
		}
		var m metav1.PartialObjectMetadata
		if err := m.Unmarshal(v); err != nil {
			return fmt.Errorf("decode list item: %w", err)
		}
		fn(liveOf(&m.ObjectMeta))
		return nil
	})
}

// eachField calls fn with the number and bytes of each length-delimited
// field of the protobuf message b, and skips the others.
func eachField(b []byte, fn func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if typ != protowire.BytesType {
			if l = protowire.ConsumeFieldValue(n, typ, b); l < 0 {
				return protowire.ParseError(l)
			}
			b = b[l:]
			continue
		}
		v, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		if err := fn(n, v); err != nil {
			return err
		}
		b = b[l:]
	}
	return nil
}

// decodeList reads a list in JSON from r and calls fn with each of its
// items, decoding one at a time.
func decodeList(r io.Reader, fn func(liveObject)) error {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("decode list: %w", err)
		}
		if tok != "items" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return fmt.Errorf("decode list: %w", err)
			}
			continue
		}
		if err := decodeItems(dec, fn); err != nil {
			return err
		}
	}
	return expectDelim(dec, '}')
}

// decodeItems reads the items array, one item at a time.
func decodeItems(dec *json.Decoder, fn func(liveObject)) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("decode list items: %w", err)
	}
	if tok == nil {
		return nil // "items": null
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("decode list items: want an array, got %v", tok)
	}
	for dec.More() {
		var m metav1.PartialObjectMetadata
		if err := dec.Decode(&m); err != nil {
			return fmt.Errorf("decode list item: %w", err)
		}
		fn(liveOf(&m.ObjectMeta))
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("decode list: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("decode list: want %q, got %v", want, tok)
	}
	return nil
}

// managedFieldsHash hashes the fields trainops's own apply of the object
// owns.
func managedFieldsHash(entries []metav1.ManagedFieldsEntry) string {
	for _, m := range entries {
		if builder.OwnApply(m) && m.FieldsV1 != nil {
			return fieldsHash(m.FieldsV1.Raw)
		}
	}
	return ""
}

// htmlEscapes are the escapes a JSON encoder may write where protobuf's
// bytes hold the character itself: undone before hashing, so a set of
// fields hashes the same from a list read as JSON and an apply's answer.
var htmlEscapes = [][2][]byte{
	{[]byte(`\u003c`), []byte("<")},
	{[]byte(`\u003e`), []byte(">")},
	{[]byte(`\u0026`), []byte("&")},
	{[]byte(`\u2028`), []byte("\u2028")},
	{[]byte(`\u2029`), []byte("\u2029")},
}

// fieldsHash hashes a managed fields entry's fieldsV1.
func fieldsHash(raw []byte) string {
	if bytes.Contains(raw, []byte(`\u`)) {
		for _, r := range htmlEscapes {
			raw = bytes.ReplaceAll(raw, r[0], r[1])
		}
	}
	h := fnv.New64a()
	_, _ = h.Write(raw)
	return fmt.Sprintf("%016x", h.Sum64())
}

// mappingOf is gvk's REST mapping: the checks' when they found it.
func (e *Engine) mappingOf(gvk schema.GroupVersionKind, ds []*desired) (*meta.RESTMapping, error) {
	for _, d := range ds {
		if d.mapping != nil {
			return d.mapping, nil
		}
	}
	return e.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
}
