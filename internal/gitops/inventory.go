// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keys of the inventory ConfigMap.
const (
	keyRepo          = "repo"
	keyRevision      = "lastAppliedRevision"
	keyAppliedAt     = "lastAppliedTime"
	keyAttempted     = "lastAttemptedRevision"
	keyAttemptedAt   = "lastAttemptedTime"
	keyError         = "lastError"
	keySettings      = "settings"
	keyEntries       = "entries.json.gz"
	maxInventoryGzip = 900 << 10 // under the 1 MiB object limit
)

// AnnotationSyncRequested on the inventory asks the leader for a sync now
// (the webhook sets it, on whichever replica it lands).
const AnnotationSyncRequested = "trainops.dev/sync-requested-at"

// Entry is one object trainops applied from Git.
type Entry struct {
	Group     string `json:"g,omitempty"`
	Version   string `json:"v"`
	Kind      string `json:"k"`
	Namespace string `json:"ns,omitempty"`
	Name      string `json:"n"`
	// Fields hashes the fields trainops owned after its last apply (its
	// managedFields entry), to notice another writer changing them.
	Fields string `json:"f,omitempty"`
	// Hash is the applied configuration's hash.
	Hash string `json:"h,omitempty"`
	// UID is the object's UID as its last apply answered: what makes the
	// live object of this name the one the sync applied (ownership.go).
	UID string `json:"u,omitempty"`
	// Pending marks an object recorded just before its first apply, so a
	// sync stopped between the apply and the inventory's save still knows
	// it (ownership.go).
	Pending bool `json:"p,omitempty"`
}

// GVK is the entry's group, version and kind.
func (e Entry) GVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: e.Group, Version: e.Version, Kind: e.Kind}
}

// Key identifies the object regardless of version.
func (e Entry) Key() string { return e.Group + "/" + e.Kind + "/" + e.Namespace + "/" + e.Name }

// ID is "Kind namespace/name", for messages.
func (e Entry) ID() string {
	if e.Namespace == "" {
		return e.Kind + " " + e.Name
	}
	return e.Kind + " " + e.Namespace + "/" + e.Name
}

// Inventory is what trainops owns, kept in a ConfigMap so a restarted or
// newly elected process knows it.
type Inventory struct {
	Repo                  string
	LastAppliedRevision   string
	LastAppliedTime       time.Time
	LastAttemptedRevision string
	LastAttemptedTime     time.Time
	LastError             string
	// Settings fingerprints the trainops build and engine settings that
	// made the last applied revision's objects (Engine.settings).
	Settings string
	Entries  map[string]Entry
}

// Counts are the entries per kind.
func (inv *Inventory) Counts() map[string]int {
	out := map[string]int{}
	for _, e := range inv.Entries {
		if e.Pending {
			continue // not applied yet, as far as this inventory knows
		}
		out[e.Kind]++
	}
	return out
}

// inventoryStore reads and writes the inventory ConfigMap.
type inventoryStore struct {
	client    client.Client
	namespace string
	name      string
	owner     *metav1.OwnerReference
}

func (s inventoryStore) key() client.ObjectKey {
	return client.ObjectKey{Namespace: s.namespace, Name: s.name}
}

// Load reads the inventory; an absent one is empty.
func (s inventoryStore) Load(ctx context.Context) (*Inventory, *corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := s.client.Get(ctx, s.key(), cm)
	if apierrors.IsNotFound(err) {
		return &Inventory{Entries: map[string]Entry{}}, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read inventory %s/%s: %w", s.namespace, s.name, err)
	}
	inv, err := DecodeInventory(cm)
	if err != nil {
		return nil, nil, fmt.Errorf("inventory %s/%s: %w", s.namespace, s.name, err)
	}
	return inv, cm, nil
}

// DecodeInventory reads an inventory from its ConfigMap.
func DecodeInventory(cm *corev1.ConfigMap) (*Inventory, error) {
	inv := &Inventory{
		Repo:                  cm.Data[keyRepo],
		LastAppliedRevision:   cm.Data[keyRevision],
		LastAttemptedRevision: cm.Data[keyAttempted],
		LastError:             cm.Data[keyError],
		Settings:              cm.Data[keySettings],
		Entries:               map[string]Entry{},
	}
	inv.LastAppliedTime, _ = time.Parse(time.RFC3339, cm.Data[keyAppliedAt])
	inv.LastAttemptedTime, _ = time.Parse(time.RFC3339, cm.Data[keyAttemptedAt])
	if raw := cm.BinaryData[keyEntries]; len(raw) > 0 {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		if err := decodeEntries(io.LimitReader(zr, 64<<20), inv.Entries); err != nil {
			return nil, err
		}
	}
	return inv, nil
}

// decodeEntries reads the JSON array of entries from r into entries, one
// at a time, by key. Entries repeat their group, version, kind and
// namespace: each distinct one is kept once.
func decodeEntries(r io.Reader, entries map[string]Entry) error {
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return fmt.Errorf("inventory entries: not an array (%v)", err)
	}
	once := sharedStrings{}
	for dec.More() {
		var e Entry
		if err := dec.Decode(&e); err != nil {
			return fmt.Errorf("inventory entries: %w", err)
		}
		e.Group, e.Version, e.Kind, e.Namespace = once.of(e.Group), once.of(e.Version), once.of(e.Kind), once.of(e.Namespace)
		entries[e.Key()] = e
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim(']') {
		return fmt.Errorf("inventory entries: the array does not end (%v)", err)
	}
	return nil
}

// sharedStrings keeps one copy of each string it is given.
type sharedStrings map[string]string

// of is the copy of s kept, s itself the first time.
func (m sharedStrings) of(s string) string {
	if c, ok := m[s]; ok {
		return c
	}
	m[s] = s
	return s
}

// Save writes the inventory when it changed, and returns the ConfigMap as
// it now stands (current when unchanged).
func (s inventoryStore) Save(ctx context.Context, inv *Inventory, current *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	// Sorted by key (the map's own, not made again for each comparison).
	keys := make([]string, 0, len(inv.Entries))
	for k := range inv.Entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	entries := make([]Entry, 0, len(keys))
	for _, k := range keys {
		entries = append(entries, inv.Entries[k])
	}
	raw, err := json.Marshal(entries)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.ModTime = time.Time{} // stable bytes for equal content
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if buf.Len() > maxInventoryGzip {
		return nil, fmt.Errorf("inventory of %d objects does not fit in one ConfigMap (%d KiB compressed)", len(entries), buf.Len()>>10)
	}
	data := map[string]string{
		keyRepo:      inv.Repo,
		keyRevision:  inv.LastAppliedRevision,
		keyAttempted: inv.LastAttemptedRevision,
		keyError:     inv.LastError,
		keySettings:  inv.Settings,
	}
	if !inv.LastAppliedTime.IsZero() {
		data[keyAppliedAt] = inv.LastAppliedTime.UTC().Format(time.RFC3339)
	}
	if !inv.LastAttemptedTime.IsZero() {
		data[keyAttemptedAt] = inv.LastAttemptedTime.UTC().Format(time.RFC3339)
	}
	if current == nil {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace, Labels: inventoryLabels()},
			Data:       data,
			BinaryData: map[string][]byte{keyEntries: buf.Bytes()},
		}
		if s.owner != nil {
			cm.OwnerReferences = []metav1.OwnerReference{*s.owner}
		}
		return cm, s.client.Create(ctx, cm)
	}
	if equalStrings(current.Data, data) && bytes.Equal(current.BinaryData[keyEntries], buf.Bytes()) {
		return current, nil
	}
	cm := current.DeepCopy()
	cm.Data = data
	cm.BinaryData = map[string][]byte{keyEntries: buf.Bytes()}
	return cm, s.client.Update(ctx, cm)
}

func inventoryLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/managed-by": "trainops", "app.kubernetes.io/part-of": "trainops", "app.kubernetes.io/component": "inventory"}
}

func equalStrings(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// InventoryName is the name of the inventory ConfigMap of sync name.
func InventoryName(name string) string { return name + "-inventory" }

// ReadInventory reads the inventory of sync name in namespace, for
// `trainops status`.
func ReadInventory(ctx context.Context, c client.Client, namespace, name string) (*Inventory, error) {
	inv, cm, err := inventoryStore{client: c, namespace: namespace, name: InventoryName(name)}.Load(ctx)
	if err != nil {
		return nil, err
	}
	if cm == nil {
		return nil, fmt.Errorf("no inventory %s/%s: %w", namespace, InventoryName(name), ErrNoInventory)
	}
	return inv, nil
}

// ErrNoInventory is ReadInventory's error when no sync has recorded an
// inventory yet.
var ErrNoInventory = errors.New("trainops has not synced a repository into this cluster yet")

// RecordFailure notes a sync that failed before rendering (a fetch that
// failed) in the inventory, so status shows it while the last applied state
// stays.
func (e *Engine) RecordFailure(ctx context.Context, err error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	store := e.inventory()
	inv, cm, lerr := store.Load(ctx)
	if lerr != nil {
		return lerr
	}
	inv.Repo = e.Opts.Repo
	inv.LastAttemptedTime = time.Now()
	inv.LastError = err.Error()
	_, err = store.Save(ctx, inv, cm)
	return err
}

// desired is the inventory as a plan's input: each recorded object with the
// hash it was applied with, and no object.
func (inv *Inventory) desired() []*desired {
	out := make([]*desired, 0, len(inv.Entries))
	for key, en := range inv.Entries {
		out = append(out, &desired{gvk: en.GVK(), namespace: en.Namespace, name: en.Name, key: key, hash: en.Hash})
	}
	return out
}
