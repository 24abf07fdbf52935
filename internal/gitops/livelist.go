package gitops

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// listedItem is the part of a metadata list item a plan reads.
type listedItem struct {
	Metadata struct {
		Namespace         string            `json:"namespace"`
		Name              string            `json:"name"`
		DeletionTimestamp *metav1.Time      `json:"deletionTimestamp"`
		Annotations       map[string]string `json:"annotations"`
		ManagedFields     []struct {
			Manager     string          `json:"manager"`
			Operation   string          `json:"operation"`
			Subresource string          `json:"subresource"`
			FieldsV1    json.RawMessage `json:"fieldsV1"`
		} `json:"managedFields"`
	} `json:"metadata"`
}

// metadataListJSON asks the API server for a list of metadata only, as
// JSON: a plan reads it one item at a time.
const metadataListJSON = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

// listLive calls fn with each object of mapping's kind in namespace ns
// ("": all) that carries this sync's label. The API server's answer is
// decoded one item at a time and never held whole: at 5,000 objects the
// decoded list was a third of a sync's live heap.
func (e *Engine) listLive(ctx context.Context, mapping *meta.RESTMapping, ns string, fn func(liveObject)) error {
	if e.lists == nil {
		return fmt.Errorf("sync engine: not connected (Connect) to list %s", mapping.Resource.Resource)
	}
	req := e.lists.Get().AbsPath(listPath(mapping, ns)...).
		Param("labelSelector", LabelSync+"="+e.SyncLabel()).
		SetHeader("Accept", metadataListJSON)
	body, err := req.Stream(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	return decodeList(body, fn)
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

// decodeList reads a list from r and calls fn with each of its items.
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
		var it listedItem
		if err := dec.Decode(&it); err != nil {
			return fmt.Errorf("decode list item: %w", err)
		}
		m := &it.Metadata
		o := liveObject{namespace: m.Namespace, name: m.Name, deleting: m.DeletionTimestamp != nil, hash: m.Annotations[builder.AnnotationAppliedHash]}
		for _, f := range m.ManagedFields {
			if isOwnApply(f.Manager, f.Operation, f.Subresource) && len(f.FieldsV1) > 0 && string(f.FieldsV1) != "null" {
				o.fields = fieldsHash(f.FieldsV1)
				break
			}
		}
		fn(o)
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

// isOwnApply says a managed fields entry is trainops's own apply of the
// object itself.
func isOwnApply(manager, operation, subresource string) bool {
	return manager == builder.FieldManager && operation == string(metav1.ManagedFieldsOperationApply) && subresource == ""
}

// managedFieldsHash hashes the fields trainops's apply owns, as an apply's
// answer gives them.
func managedFieldsHash(entries []metav1.ManagedFieldsEntry) string {
	for _, m := range entries {
		if isOwnApply(m.Manager, string(m.Operation), m.Subresource) && m.FieldsV1 != nil {
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
