// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trainops/trainops/internal/apierr"
	"github.com/trainops/trainops/internal/builder"
)

// liveObject is what a plan reads of one live object carrying the sync
// label: a few strings, where the decoded list item it comes from held the
// whole metadata, managed fields included.
type liveObject struct {
	namespace, name string
	uid             types.UID
	deleting        bool
	// hash is the object's applied-hash annotation.
	hash string
	// fields hashes trainops's own apply entry of its managed fields (see
	// builder.FieldsHash).
	fields string
}

// metadataListAccept asks the API server for a list of metadata only:
// protobuf, or else JSON. Either is decoded one item at a time from the
// raw answer, never into a whole decoded list.
const metadataListAccept = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1," +
	"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

// listLive calls fn with each object of mapping's kind in namespace ns
// ("": all) that carries this sync's label, as the sync's identity. The
// API server's answer is read and decoded one item at a time, never held
// whole: for a large sync the decoded list was a large share of its live
// heap (docs/benchmarks.md).
func (e *Engine) listLive(ctx context.Context, mapping *meta.RESTMapping, ns string, fn func(liveObject)) error {
	if e.lists == nil {
		return fmt.Errorf("sync engine: not connected (Connect) to list %s", mapping.Resource.Resource)
	}
	body, err := e.lists.Get().AbsPath(listPath(mapping, ns)...).
		Param("labelSelector", LabelSync+"="+e.SyncLabel()).
		SetHeader("Accept", metadataListAccept).
		Stream(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	r := bufio.NewReaderSize(body, 32<<10)
	if head, _ := r.Peek(len(protoMagic)); bytes.Equal(head, protoMagic) {
		return decodeListProto(r, fn)
	}
	return decodeList(r, fn)
}

// listKind lists, as the sync's identity, the labelled objects of
// mapping's kind where ds (desired objects of that kind) may be: the
// namespaces listNamespaces gives, and, when the identity may not list
// the whole cluster, each namespace ds names instead. Objects where the
// identity may not even list refuse the revision (ReasonForbidden), each
// named: the identity could not write them either.
func (e *Engine) listKind(ctx context.Context, mapping *meta.RESTMapping, ds []*desired, fn func(liveObject)) error {
	var problems []Problem
	forbid := func(ns string, err error) {
		for _, d := range ds {
			if ns == "" || d.namespace == ns {
				problems = append(problems, Problem{File: d.file, Object: d.id(), Message: apierr.Message(err)})
			}
		}
	}
	for _, ns := range e.listNamespaces(ds) {
		err := e.listLive(ctx, mapping, ns, fn)
		if ns == "" && apierrors.IsForbidden(err) && mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			err = nil
			for _, n := range namespacesOf(ds) {
				if lerr := e.listLive(ctx, mapping, n, fn); apierrors.IsForbidden(lerr) {
					forbid(n, lerr)
				} else if lerr != nil {
					return lerr
				}
			}
		}
		if apierrors.IsForbidden(err) {
			forbid(ns, err)
		} else if err != nil {
			return err
		}
	}
	if len(problems) > 0 {
		return &SyncError{Reason: ReasonForbidden, Problems: problems}
	}
	return nil
}

// namespacesOf is the namespaces ds's objects are in, sorted, once each.
func namespacesOf(ds []*desired) []string {
	var out []string
	for _, d := range ds {
		if d.namespace != "" && !slices.Contains(out, d.namespace) {
			out = append(out, d.namespace)
		}
	}
	slices.Sort(out)
	return out
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
	return liveObject{namespace: m.Namespace, name: m.Name, uid: m.UID, deleting: m.DeletionTimestamp != nil,
		hash: m.Annotations[builder.AnnotationAppliedHash], fields: managedFieldsHash(m.ManagedFields)}
}

// protoMagic starts every protobuf answer of the API server, before the
// runtime.Unknown envelope that holds the list.
var protoMagic = []byte("k8s\x00")

// decodeListProto reads a PartialObjectMetadataList in the API server's
// protobuf envelope from r and calls fn with each item, reading and
// decoding one at a time.
func decodeListProto(r *bufio.Reader, fn func(liveObject)) error {
	if head, err := r.Peek(len(protoMagic)); err != nil || !bytes.Equal(head, protoMagic) {
		return errors.New("decode list: the answer is not in the API server's protobuf envelope")
	}
	_, _ = r.Discard(len(protoMagic))
	// runtime.Unknown: 1 typeMeta, 2 raw (the list), written in that order.
	var kind string
	var buf []byte
	for {
		n, size, err := nextBytesField(r)
		if err == io.EOF {
			return errors.New("decode list: the answer holds no list")
		}
		if err != nil {
			return fmt.Errorf("decode list: %w", err)
		}
		switch n {
		case 1:
			if buf, err = readN(r, size, buf); err != nil {
				return fmt.Errorf("decode list: %w", err)
			}
			var tm runtime.TypeMeta
			if err := tm.Unmarshal(buf); err != nil {
				return fmt.Errorf("decode list: %w", err)
			}
			kind = tm.Kind
		case 2:
			if kind != "PartialObjectMetadataList" {
				return fmt.Errorf("decode list: the API server answered a %q, not a PartialObjectMetadataList", kind)
			}
			list := &io.LimitedReader{R: r, N: int64(size)}
			if err := decodeItemsProto(bufio.NewReader(list), fn); err != nil {
				return err
			}
			if list.N > 0 {
				return fmt.Errorf("decode list: %w", io.ErrUnexpectedEOF)
			}
			return nil
		default:
			if _, err := r.Discard(size); err != nil {
				return fmt.Errorf("decode list: %w", err)
			}
		}
	}
}

// decodeItemsProto reads a PartialObjectMetadataList's fields (1
// metadata, 2 items) from r, decoding each item into fn in one buffer.
func decodeItemsProto(r *bufio.Reader, fn func(liveObject)) error {
	var buf []byte
	for {
		n, size, err := nextBytesField(r)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("decode list: %w", err)
		}
		if n != 2 {
			if _, err := r.Discard(size); err != nil {
				return fmt.Errorf("decode list: %w", err)
			}
			continue
		}
		if buf, err = readN(r, size, buf); err != nil {
			return fmt.Errorf("decode list item: %w", err)
		}
		// Unmarshal copies every string and byte slice out of buf.
		var m metav1.PartialObjectMetadata
		if err := m.Unmarshal(buf); err != nil {
			return fmt.Errorf("decode list item: %w", err)
		}
		fn(liveOf(&m.ObjectMeta))
	}
}

// maxField bounds one length-delimited field of a list answer: the API
// server's own limit on a request or answer is lower.
const maxField = 1 << 30

// nextBytesField reads the next field's tag from r, skipping fields that
// are not length-delimited, and returns its number and length; io.EOF
// when r ends before a tag.
func nextBytesField(r *bufio.Reader) (protowire.Number, int, error) {
	for {
		tag, err := binary.ReadUvarint(r)
		if err != nil {
			return 0, 0, err
		}
		n, typ := protowire.DecodeTag(tag)
		var skip int
		switch typ {
		case protowire.BytesType:
			l, err := binary.ReadUvarint(r)
			if err != nil {
				return 0, 0, noEOF(err)
			}
			if l > maxField {
				return 0, 0, fmt.Errorf("field %d of %d bytes", n, l)
			}
			return n, int(l), nil
		case protowire.VarintType:
			if _, err := binary.ReadUvarint(r); err != nil {
				return 0, 0, noEOF(err)
			}
			continue
		case protowire.Fixed64Type:
			skip = 8
		case protowire.Fixed32Type:
			skip = 4
		default:
			return 0, 0, fmt.Errorf("field %d of wire type %d", n, typ)
		}
		if _, err := r.Discard(skip); err != nil {
			return 0, 0, noEOF(err)
		}
	}
}

// readN reads n bytes from r into buf, grown when too small.
func readN(r io.Reader, n int, buf []byte) ([]byte, error) {
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	_, err := io.ReadFull(r, buf)
	return buf, noEOF(err)
}

// noEOF is err, but an answer that ends within a field is cut short.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
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
			return builder.FieldsHash(m.FieldsV1.Raw)
		}
	}
	return ""
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
