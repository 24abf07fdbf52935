// SPDX-License-Identifier: Apache-2.0

// Package gitops is trainops's sync engine: it renders a revision of the
// training-config repository, validates every object, dry-runs the changes
// on the API server, applies them with server-side apply in stages, prunes
// what left Git, and keeps an inventory of what it owns. A revision is all
// or nothing: if any object is refused, nothing of it is applied.
package gitops

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"time"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"

	ssautils "github.com/fluxcd/pkg/ssa/utils"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/crdschema"
	"github.com/trainops/trainops/internal/decrypt"
	"github.com/trainops/trainops/internal/version"
	"github.com/trainops/trainops/internal/workload"
	"github.com/trainops/trainops/render"
)

// Labels and annotations on what trainops applies from Git, as the GitSync
// API defines them.
const (
	LabelSync       = gitopsv1alpha1.LabelSync
	AnnotationPrune = gitopsv1alpha1.AnnotationPrune
	AnnotationAdopt = gitopsv1alpha1.AnnotationAdopt
)

// Options configure the engine.
type Options struct {
	// Name of the sync: the inventory is "<Name>-inventory" (default
	// DefaultName).
	Name string
	// Namespace holds the inventory (trainops's own namespace).
	Namespace string
	// Path is the folder of the repository to render.
	Path string
	// Repo is recorded in the inventory (without credentials).
	Repo string
	// AllowedKinds may appear in the repository; anything else fails the
	// revision.
	AllowedKinds []schema.GroupKind
	// AllowedNamespaces, when set, are the only namespaces objects may be
	// in (or, for Namespace objects, be); anything else fails the revision.
	AllowedNamespaces []string
	// ProtectedNamespaces are never written by a sync, whatever
	// AllowedNamespaces says; check.AlwaysProtected and Namespace are added.
	ProtectedNamespaces []string
	// Workload bounds what PyJobs and ClusterPolicies may ask for.
	Workload workload.Policy
	// Prune deletes objects that left Git.
	Prune bool
	// PruneBudget caps one sync's deletions.
	PruneBudget config.Budget
	// AllowEmpty lets a revision that renders nothing prune everything.
	AllowEmpty bool
	// Force takes over fields another manager changed (drift correction);
	// without it such conflicts fail the revision and are reported.
	Force bool
	// Concurrency is the number of parallel API requests for dry-runs and
	// applies.
	Concurrency int
	// ServerDryRunAll dry-runs new objects of trainops's kinds on the API
	// server too; by default they are validated offline with the same
	// schema and CEL code (identical messages), which halves the requests
	// of a cold sync. Turn it on when admission policies other than the
	// CRDs' own judge PyJobs, SREAgents or ClusterPolicies.
	ServerDryRunAll bool
	// Render bounds each render of a revision (zero fields: the defaults).
	Render render.Limits
	// SyncLabel is the value of LabelSync on this sync's objects (default
	// Namespace): unique to one sync in the cluster.
	SyncLabel string
	// OwnerName names the sync whose sync label is label, in the message
	// of a refused takeover (default: "the trainops of namespace
	// <label>", as the settings' sync labels its objects).
	OwnerName func(label string) string `json:"-"`
	// InventoryOwner, when set, owns the inventory ConfigMap, which then
	// goes with it (a GitSync's).
	InventoryOwner *metav1.OwnerReference
	// NamespacedOnly refuses objects of cluster-scoped kinds (Namespaces
	// among them); with AllowedNamespaces it confines a sync to them.
	NamespacedOnly bool
	// Home is trainops's own namespace, never written by a sync (default
	// Namespace).
	Home string
	// DecryptKinds are the kinds whose SOPS-encrypted objects are
	// decrypted (nil: check.DefaultDecryptKinds).
	DecryptKinds []schema.GroupKind
}

// DefaultName names trainops's sync: its inventory is
// "trainops-inventory" in trainops's namespace.
const DefaultName = "trainops"

// Engine syncs revisions into the cluster.
type Engine struct {
	// Client must read live state (not a cache).
	Client client.Client
	// Metadata makes the server-side applies. The API server answers them
	// with the object's metadata only, all the engine reads of an answer:
	// less for it to encode and for trainops to decode than the whole
	// object.
	Metadata metadata.Interface
	// Core (a core/v1 REST client) applies Namespaces: its answer's status
	// says whether the API server created one (201), so a namespace this
	// sync created for a revision it then refuses is removed again.
	Core rest.Interface
	// Writer deletes what the sync prunes or rolls back (nil: Client); a
	// sync that acts as another user writes through it as that user.
	Writer client.Client
	Mapper meta.RESTMapper
	Opts   Options
	Log    logr.Logger
	// Schemas validate new objects of trainops's kinds offline (nil: every
	// object is dry-run on the server).
	Schemas *crdschema.Schemas
	// Keys decrypt the revision's SOPS-encrypted objects (nil: such an
	// object refuses the revision). Set between syncs, never during one.
	Keys *decrypt.Keys
	// Yield, when set, is told while this engine's syncs apply, so that
	// the process's reconcilers give way (see Yield).
	Yield *Yield

	// lists reads a plan's metadata lists as trainops's own identity (a
	// core/v1 REST client, given each list's path); set by Connect.
	lists rest.Interface
	mu    sync.Mutex // one sync at a time
	// previewing keeps encrypted objects encrypted (Preview, under mu).
	previewing bool
	// strangers are the objects wearing this sync's label that the last
	// plan found and reported (reportStrangers), by key.
	strangersMu sync.Mutex
	strangers   map[string]bool
	// memo is what the last render made of each file (see reuse.go).
	memo *memo
}

// processNonce is part of every settings fingerprint of a build from a
// modified work tree, whose commit does not say what code it runs.
var processNonce = fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())

// settings fingerprints what decides how a revision is rendered, checked
// and applied: this build of trainops and the engine's options. A sync of
// the revision the inventory records as applied with the same fingerprint
// need not render it again unless the cluster drifted.
func (e *Engine) settings() string {
	build := version.Version + " " + version.Commit
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.modified" && s.Value == "true" {
				build += " " + processNonce
			}
		}
	}
	raw, err := json.Marshal(struct {
		Build string
		Opts  Options
		Keys  []string // the recipients the keys decrypt for
	}{build, e.Opts, e.Keys.Recipients()})
	if err != nil {
		// Settings that cannot be fingerprinted never match a recorded
		// sync: every revision is rendered.
		return fmt.Sprintf("unhashable %d", time.Now().UnixNano())
	}
	h := fnv.New64a()
	_, _ = h.Write(raw)
	return fmt.Sprintf("%016x", h.Sum64())
}

// SyncLabel is the value of LabelSync on this engine's objects: Opts.SyncLabel,
// or the namespace of its inventory.
func (e *Engine) SyncLabel() string { return cmp.Or(e.Opts.SyncLabel, e.Opts.Namespace) }

func (e *Engine) inventory() inventoryStore {
	return inventoryStore{client: e.Client, namespace: e.Opts.Namespace, name: InventoryName(cmp.Or(e.Opts.Name, DefaultName)), owner: e.Opts.InventoryOwner}
}

// writer is the client that deletes, and reads what a sync may only see
// as its own identity.
func (e *Engine) writer() client.Client {
	if e.Writer != nil {
		return e.Writer
	}
	return e.Client
}

// desired is one object to apply.
type desired struct {
	// obj is nil in the inventory's list of what it recorded, which is
	// only a plan's input (Inventory.desired).
	obj             *unstructured.Unstructured
	file            string
	gvk             schema.GroupVersionKind
	namespace, name string
	// mapping is gvk's, as the checks found it (nil: not checked).
	mapping *meta.RESTMapping
	key     string
	hash    string
	body    []byte // the object as JSON, once prepared
	exists  bool   // in the cluster already (from the plan's list)
	// ours: the live object is the one the inventory records (owns).
	ours bool
}

func (d *desired) id() string { return render.IDOf(d.gvk.Kind, d.namespace, d.name) }

// Sync renders dir (a checkout of revision) and makes the cluster match it.
func (e *Engine) Sync(ctx context.Context, dir, revision string) (res Result, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	start := time.Now()
	res.Revision = revision
	if e.Metadata == nil || e.Core == nil || e.Mapper == nil {
		return res, errors.New("sync engine: Metadata, Core and Mapper must be set")
	}
	store := e.inventory()
	inv, cm, err := store.Load(ctx)
	if err != nil {
		return res, err
	}
	settings := e.settings()
	noop := false
	defer func() {
		res.Duration = time.Since(start)
		inv.Repo = e.Opts.Repo
		switch {
		case noop && err == nil:
			// Nothing to do: nothing to record either, and no write. The
			// times stay those of the last sync that did something.
		case err == nil:
			inv.LastAttemptedRevision, inv.LastAttemptedTime = revision, start
			inv.LastAppliedRevision, inv.LastAppliedTime, inv.LastError = revision, start, ""
			inv.Settings = settings
		default:
			inv.LastAttemptedRevision, inv.LastAttemptedTime = revision, start
			inv.LastError = err.Error()
		}
		if _, serr := store.Save(ctx, inv, cm); serr != nil {
			err = errors.Join(err, fmt.Errorf("save inventory: %w", serr))
		}
		res.Counts = inv.Counts()
	}()

	mark := time.Now()
	if done, err := e.nothingToDo(ctx, inv, revision, settings, &res, &mark); done || err != nil {
		noop = done
		return res, err
	}
	want, reused, err := e.renderChecked(ctx, dir, revision, settings)
	if err != nil {
		return res, err
	}
	res.Reused = reused
	res.phase("render", &mark)
	// New objects of trainops's kinds are validated offline while plan
	// lists the cluster: those the inventory does not record are most
	// likely new.
	early := e.validateEarly(ctx, want, inv)
	// Plan: what changed since the last apply, from a metadata-only list
	// per kind: O(kinds) requests when nothing did.
	changed, unchanged, strangers, err := e.plan(ctx, want, inv)
	e.reportStrangers(strangers)
	res.phase("plan", &mark)
	if se := (*SyncError)(nil); errors.As(err, &se) {
		se.Revision = revision
		return res, se
	}
	if err != nil {
		return res, err
	}
	if err := e.materialize(ctx, dir, revision, settings, changed); err != nil {
		return res, err
	}
	// From here on the sync writes: the reconcilers' writes give way.
	if len(changed) > 0 {
		defer e.Yield.Applying()()
	}
	if err := e.refuseTakeovers(ctx, changed, inv, revision); err != nil {
		return res, err
	}
	res.Unchanged = unchanged
	gone, err := e.toPrune(ctx, want, inv, &res)
	if err != nil {
		return res, err
	}
	if err := e.encodeBodies(ctx, changed); err != nil {
		return res, err
	}
	// The intent is saved while the revision is dry-run: before the first
	// apply, which waits for it, and before the inventory's last save
	// (deferred above, so run after this wait).
	intentDone := make(chan struct{})
	var intentErr error
	go func() {
		defer close(intentDone)
		cm, intentErr = e.recordIntent(ctx, store, inv, cm, changed)
	}()
	defer func() { <-intentDone }()
	intent := func() error { <-intentDone; return intentErr }
	if err := e.applyStaged(ctx, changed, want, inv, early, intent, &res, &mark); err != nil {
		return res, err
	}
	if len(gone) > 0 {
		if err := e.prune(ctx, gone, inv, &res); err != nil {
			return res, err
		}
		res.phase("prune", &mark)
	}
	return res, nil
}

// nothingToDo reports whether the revision is unchanged since its last
// clean sync by this build with these settings (in this process or before
// a restart, on this replica or another), and every object the inventory
// records is as it was applied: then there is nothing to render. Objects
// that merely carry the sync label change nothing.
func (e *Engine) nothingToDo(ctx context.Context, inv *Inventory, revision, settings string, res *Result, mark *time.Time) (bool, error) {
	if inv.LastAppliedRevision != revision || inv.LastError != "" || inv.Settings != settings {
		return false, nil
	}
	changed, unchanged, strangers, err := e.plan(ctx, inv.desired(), inv)
	res.phase("plan", mark)
	if err != nil {
		return false, err
	}
	e.reportStrangers(strangers)
	if len(changed) == 0 {
		res.Unchanged = unchanged
		return true, nil
	}
	// Drift: render the revision to put it back.
	return false, nil
}

// toPrune lists what leaves Git with this revision (when pruning, see
// gone) and is still the object the sync applied (verifyGone), and
// refuses the revision when that is past the prune budget.
func (e *Engine) toPrune(ctx context.Context, want []*desired, inv *Inventory, res *Result) ([]Entry, error) {
	if !e.Opts.Prune {
		return nil, nil
	}
	revision := res.Revision
	out, err := e.verifyGone(ctx, gone(want, inv), inv, res)
	if err != nil {
		return nil, err
	}
	if e.overBudget(out, inv) {
		ps := []Problem{{
			Message: fmt.Sprintf("the revision removes %d of %d objects, more than the prune budget (%s) allows; nothing was applied or pruned. Raise pruneBudget if this is intended", len(out), len(inv.Entries), e.Opts.PruneBudget),
		}}
		for _, g := range out {
			ps = append(ps, Problem{Object: g.ID(), Message: "would be deleted"})
		}
		return nil, &SyncError{Reason: ReasonPruneBudgetExceeded, Revision: revision, Problems: ps}
	}
	return out, nil
}

// overBudget says deleting gone is past the prune budget.
func (e *Engine) overBudget(gone []Entry, inv *Inventory) bool {
	return len(gone) > 0 && !e.Opts.PruneBudget.Allows(len(gone), len(inv.Entries))
}

// gone lists what the inventory records and want no longer holds. Objects
// that carry the sync label but are not recorded are never among them.
func gone(want []*desired, inv *Inventory) []Entry {
	wantKeys := make(map[string]bool, len(want))
	for _, d := range want {
		wantKeys[d.key] = true
	}
	var out []Entry
	for k, en := range inv.Entries {
		if !wantKeys[k] {
			out = append(out, en)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// applyStaged dry-runs and applies the changed objects in two stages.
func (e *Engine) applyStaged(ctx context.Context, changed, want []*desired, inv *Inventory, early *earlyChecks, intent func() error, res *Result, mark *time.Time) error {
	revision := res.Revision
	// Stage 1 (namespaces, CRDs), then stage 2: each dry-run in full before
	// any of it is applied. Namespaces created for a stage 2 that is then
	// refused are removed again, so a refused revision leaves nothing.
	stage1, stage2 := split(changed)
	// Every namespace in the revision exists once stage 1 is applied.
	present := map[string]bool{}
	for _, d := range want {
		if isNamespace(d.gvk) {
			present[d.name] = true
		}
	}
	// Stage 2's offline validation needs nothing from stage 1: it runs
	// while stage 1 is dry-run on the server, and a failure in it leaves
	// stage 1 unapplied too.
	var offline2, server2 []*desired
	for _, d := range stage2 {
		if e.validatedOffline(d) {
			offline2 = append(offline2, d)
		} else {
			server2 = append(server2, d)
		}
	}
	var offlineErr error
	offlineDone := make(chan struct{})
	go func() {
		defer close(offlineDone)
		offlineErr = e.dryRun(ctx, offline2, revision, present, early)
	}()
	err := e.dryRun(ctx, stage1, revision, nil, nil)
	<-offlineDone
	if err := cmp.Or(err, offlineErr); err != nil {
		return err
	}
	if err := intent(); err != nil {
		return err
	}
	res.phase("dryRun", mark)
	created, err := e.apply(ctx, stage1, inv, res)
	if err != nil {
		return err
	}
	res.phase("apply", mark)
	if err := e.dryRun(ctx, server2, revision, present, nil); err != nil {
		e.rollback(ctx, created, inv)
		return err
	}
	res.phase("dryRun", mark)
	if _, err := e.apply(ctx, stage2, inv, res); err != nil {
		return err
	}
	res.phase("apply", mark)
	return nil
}

// split puts what other objects depend on (namespaces, CRDs, cluster roles,
// classes) in the first stage, as fluxcd/pkg/ssa stages them.
func split(ds []*desired) (s1, s2 []*desired) {
	for _, d := range ds {
		if ssautils.IsClusterDefinition(d.obj) || ssautils.IsClassDefinition(d.obj) {
			s1 = append(s1, d)
		} else {
			s2 = append(s2, d)
		}
	}
	return s1, s2
}

// listNamespaces are the namespaces to list a namespaced kind's objects
// in: a sync confined to a few namespaces (a GitSync without a
// ServiceAccount) finds its objects only there, and a list of one
// namespace costs the API server that namespace's objects, not the
// cluster's; otherwise the whole cluster ("").
func (e *Engine) listNamespaces(ds []*desired) []string {
	allowed := e.Opts.AllowedNamespaces
	if len(allowed) == 0 || len(allowed) > 4 || slices.ContainsFunc(ds, func(d *desired) bool { return d.namespace == "" }) {
		return []string{""}
	}
	return allowed
}

// plan splits the desired objects into those to apply and the number that
// are exactly as trainops last applied them. An object is unchanged when it
// exists, carries the desired hash, and the fields trainops owns are the
// ones it owned after its last apply (another writer changing one of them
// takes its ownership, which changes that set).
func (e *Engine) plan(ctx context.Context, want []*desired, inv *Inventory) ([]*desired, int, []Entry, error) {
	byGVK := map[schema.GroupVersionKind][]*desired{}
	for _, d := range want {
		byGVK[d.gvk] = append(byGVK[d.gvk], d)
	}
	// One metadata list per kind, all at once, each read into the few
	// strings the plan compares.
	type listed struct {
		gvk  schema.GroupVersionKind
		live map[string]liveObject // by namespace/name
		err  error
	}
	results := make(chan listed, len(byGVK))
	for gvk, ds := range byGVK {
		go func() {
			live := map[string]liveObject{}
			mapping, err := e.mappingOf(gvk, ds)
			if err == nil {
				err = e.listKind(ctx, mapping, ds, func(o liveObject) { live[o.namespace+"/"+o.name] = o })
			}
			results <- listed{gvk, live, err}
		}()
	}
	var changed []*desired
	var strangers []Entry
	var forbidden []Problem // objects the sync's identity may not list
	var errs []error
	unchanged := 0
	for range byGVK {
		r := <-results
		var se *SyncError
		if errors.As(r.err, &se) {
			forbidden = append(forbidden, se.Problems...)
			continue
		}
		if r.err != nil {
			errs = append(errs, fmt.Errorf("list %s: %w", check.GVKString(r.gvk), r.err))
			continue
		}
		gvk := r.gvk
		for _, m := range r.live {
			en := Entry{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: m.namespace, Name: m.name}
			if _, known := inv.Entries[en.Key()]; !known && !m.deleting {
				strangers = append(strangers, en)
			}
		}
		for _, d := range byGVK[gvk] {
			m, ok := r.live[d.namespace+"/"+d.name]
			d.exists = ok
			en, known := inv.Entries[d.key]
			d.ours = ok && known && owns(en, m.uid, m.fields != "")
			if d.ours && en.UID == "" {
				// Recorded before UIDs were, or pending: record it now.
				en.UID, en.Pending = string(m.uid), false
				inv.Entries[d.key] = en
			}
			if d.ours && !m.deleting && m.hash == d.hash &&
				en.Hash == d.hash && en.Fields != "" && m.fields == en.Fields {
				unchanged++
				continue
			}
			changed = append(changed, d)
		}
	}
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		return nil, 0, nil, errors.Join(errs...)
	}
	if len(forbidden) > 0 {
		sort.Slice(forbidden, func(i, j int) bool { return forbidden[i].String() < forbidden[j].String() })
		return nil, 0, nil, &SyncError{Reason: ReasonForbidden, Problems: forbidden}
	}
	sort.Slice(changed, func(i, j int) bool { return changed[i].key < changed[j].key })
	sort.Slice(strangers, func(i, j int) bool { return strangers[i].Key() < strangers[j].Key() })
	return changed, unchanged, strangers, nil
}
