// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"golang.org/x/sync/errgroup"

	"github.com/trainops/trainops/internal/apierr"
	"github.com/trainops/trainops/internal/builder"
)

// each runs fn over ds, Opts.Concurrency at a time, and gathers the
// problems in a stable order.
func (e *Engine) each(ctx context.Context, ds []*desired, fn func(context.Context, *desired) *Problem) []Problem {
	var (
		mu       sync.Mutex
		problems []Problem
		g        errgroup.Group
	)
	g.SetLimit(max(e.Opts.Concurrency, 1))
	for _, d := range ds {
		g.Go(func() error {
			if p := fn(ctx, d); p != nil {
				mu.Lock()
				problems = append(problems, *p)
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait() // fn reports problems, never errors
	sort.Slice(problems, func(i, j int) bool { return problems[i].String() < problems[j].String() })
	return problems
}

// serverApply server-side applies d's object (without changing it) and
// returns the object's metadata as the API server answers, and whether
// the apply created it (only known for Namespaces, the objects a refused
// revision's rollback removes).
func (e *Engine) serverApply(ctx context.Context, d *desired, dryRun bool) (*metav1.PartialObjectMetadata, bool, error) {
	// The checks found the mapping once per kind: the mapper allocates on
	// every call.
	mapping := d.mapping
	var err error
	if mapping == nil {
		if mapping, err = e.Mapper.RESTMapping(d.gvk.GroupKind(), d.gvk.Version); err != nil {
			return nil, false, err
		}
	}
	raw := d.body
	if raw == nil {
		if raw, err = d.obj.MarshalJSON(); err != nil {
			return nil, false, err
		}
	}
	opts := metav1.PatchOptions{FieldManager: builder.FieldManager}
	if e.Opts.Force {
		opts.Force = ptr.To(true)
	}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if isNamespace(d.gvk) && !dryRun {
		return e.applyNamespace(ctx, d.obj.GetName(), raw, opts)
	}
	resource := e.Metadata.Resource(mapping.Resource)
	var r metadata.ResourceInterface = resource
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		r = resource.Namespace(d.obj.GetNamespace())
	}
	m, err := r.Patch(ctx, d.obj.GetName(), types.ApplyPatchType, raw, opts)
	return m, false, err
}

// applyNamespace applies a Namespace through the core client, whose
// answer's status says whether the API server created it.
func (e *Engine) applyNamespace(ctx context.Context, name string, raw []byte, opts metav1.PatchOptions) (*metav1.PartialObjectMetadata, bool, error) {
	ns := &corev1.Namespace{}
	var status int
	err := e.Core.Patch(types.ApplyPatchType).Resource("namespaces").Name(name).
		VersionedParams(&opts, scheme.ParameterCodec).Body(raw).Do(ctx).StatusCode(&status).Into(ns)
	if err != nil {
		return nil, false, err
	}
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: ns.ObjectMeta}, status == http.StatusCreated, nil
}

func isNamespace(gvk schema.GroupVersionKind) bool { return gvk.Group == "" && gvk.Kind == "Namespace" }

// dryRun asks the API server to validate every change: CEL rules,
// immutable fields, conflicts with other managers. New objects of
// trainops's kinds are validated offline with the API server's own code
// instead, unless ServerDryRunAll.
func (e *Engine) dryRun(ctx context.Context, ds []*desired, revision string, present map[string]bool, early *earlyChecks) error {
	missingNS, err := e.missingNamespaces(ctx, ds, present)
	if err != nil {
		return err
	}
	problems := e.each(ctx, ds, func(ctx context.Context, d *desired) *Problem {
		if e.validatedOffline(d) {
			if ns := d.obj.GetNamespace(); ns != "" && missingNS[ns] {
				return &Problem{File: d.file, Object: d.id(), Message: fmt.Sprintf("namespace %s does not exist: add it to the repository or create it", ns)}
			}
			err, done := early.result(d.key)
			if !done {
				err = e.Schemas.Validate(ctx, d.obj.DeepCopy(), nil)
			}
			if err != nil {
				return &Problem{File: d.file, Object: d.id(), Message: apierr.Message(err)}
			}
			return nil
		}
		if _, _, err := e.serverApply(ctx, d, true); err != nil {
			return &Problem{File: d.file, Object: d.id(), Message: apierr.Message(err)}
		}
		return nil
	})
	if len(problems) > 0 {
		return &SyncError{Reason: ReasonDryRunFailed, Revision: revision, Problems: problems}
	}
	return nil
}

// earlyChecks are the offline validations made while plan ran.
type earlyChecks struct {
	done chan struct{}
	errs map[string]error // by desired key; nil: valid
}

// result is the early validation of the object with key, once every early
// validation is done; done is false when it was not validated early.
func (c *earlyChecks) result(key string) (err error, done bool) {
	if c == nil {
		return nil, false
	}
	<-c.done
	err, done = c.errs[key]
	return err, done
}

// validateEarly starts validating offline, in the background, the objects
// of trainops's kinds that inv does not record; nil when there are none or
// nothing is validated offline.
func (e *Engine) validateEarly(ctx context.Context, want []*desired, inv *Inventory) *earlyChecks {
	if e.Opts.ServerDryRunAll || e.Schemas == nil {
		return nil
	}
	var ds []*desired
	for _, d := range want {
		// An object the memo gave (obj nil) is validated once materialized.
		if _, recorded := inv.Entries[d.key]; !recorded && d.obj != nil && e.Schemas.Knows(d.gvk) {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return nil
	}
	c := &earlyChecks{done: make(chan struct{}), errs: make(map[string]error, len(ds))}
	go func() {
		defer close(c.done)
		// Validation only computes: one object per core at a time, not
		// Opts.Concurrency (the API requests' width), which would hold
		// that many validations' memory at once for no more speed.
		// An object a cancelled sync did not reach is not recorded.
		errs, ran := make([]error, len(ds)), make([]bool, len(ds))
		workqueue.ParallelizeUntil(ctx, runtime.GOMAXPROCS(0), len(ds), func(i int) {
			errs[i], ran[i] = e.Schemas.Validate(ctx, ds[i].obj.DeepCopy(), nil), true
		})
		for i, d := range ds {
			if ran[i] {
				c.errs[d.key] = errs[i]
			}
		}
	}()
	return c
}

// validatedOffline reports whether d is validated offline rather than dry-run.
func (e *Engine) validatedOffline(d *desired) bool {
	return !e.Opts.ServerDryRunAll && e.Schemas != nil && !d.exists && e.Schemas.Knows(d.gvk)
}

// missingNamespaces finds the namespaces of objects validated offline that
// do not exist (a server dry-run would have said so); those in present are
// known to exist.
func (e *Engine) missingNamespaces(ctx context.Context, ds []*desired, present map[string]bool) (map[string]bool, error) {
	out := map[string]bool{}
	checked := map[string]bool{}
	for _, d := range ds {
		ns := d.obj.GetNamespace()
		if ns == "" || checked[ns] || present[ns] || !e.validatedOffline(d) {
			continue
		}
		checked[ns] = true
		err := e.Client.Get(ctx, client.ObjectKey{Name: ns}, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}})
		switch {
		case apierrors.IsNotFound(err):
			out[ns] = true
		case err != nil:
			return nil, fmt.Errorf("check namespace %s: %w", ns, err)
		}
	}
	return out, nil
}

// apply applies ds and records them in the inventory; it returns the
// namespaces it created.
func (e *Engine) apply(ctx context.Context, ds []*desired, inv *Inventory, res *Result) ([]*desired, error) {
	var mu sync.Mutex
	var created []*desired
	problems := e.each(ctx, ds, func(ctx context.Context, d *desired) *Problem {
		u, isNew, err := e.serverApply(ctx, d, false)
		if err != nil {
			return &Problem{File: d.file, Object: d.id(), Message: apierr.Message(err)}
		}
		mu.Lock()
		defer mu.Unlock()
		if isNew && isNamespace(d.gvk) {
			created = append(created, d)
		}
		inv.Entries[d.key] = Entry{Group: d.gvk.Group, Version: d.gvk.Version, Kind: d.gvk.Kind, Namespace: u.GetNamespace(), Name: u.GetName(), Hash: d.hash, Fields: managedFieldsHash(u.GetManagedFields()), UID: string(u.GetUID())}
		res.Applied = append(res.Applied, d.id())
		return nil
	})
	sort.Strings(res.Applied)
	if len(problems) > 0 {
		return created, &SyncError{Reason: ReasonApplyFailed, Revision: res.Revision, Problems: problems}
	}
	return created, nil
}

// rollback deletes namespaces this sync created for a revision it then
// refused.
func (e *Engine) rollback(ctx context.Context, created []*desired, inv *Inventory) {
	for _, d := range created {
		if err := e.writer().Delete(ctx, d.obj.DeepCopy()); client.IgnoreNotFound(err) != nil {
			e.Log.Error(err, "remove namespace created for a refused revision", "namespace", d.obj.GetName())
			continue
		}
		delete(inv.Entries, d.key)
	}
}

// Connect makes the engine's appliers (Metadata and Core), and the client
// its plans list the cluster with, for the API server of cfg, sharing hc's
// connections.
func (e *Engine) Connect(cfg *rest.Config, hc *http.Client) error {
	md, err := metadata.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return err
	}
	core, err := corev1client.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return err
	}
	e.Metadata, e.Core = md, core.RESTClient()
	if e.lists == nil {
		e.lists = e.Core
	}
	return nil
}

// ConnectAs makes the engine write, and list and look up what it applied
// and may prune, as user (impersonated: the API server's RBAC of user
// decides what it may see, apply, prune and roll back), while it reads its
// inventory with Client. Every object of a revision is then dry-run as
// user before any is applied, so a revision user may not write in full is
// refused whole.
func (e *Engine) ConnectAs(cfg *rest.Config, user string) error {
	e.lists = nil
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	if err := e.Connect(cfg, hc); err != nil {
		return err
	}
	w, err := client.New(cfg, client.Options{HTTPClient: hc, Scheme: e.Client.Scheme(), Mapper: e.Mapper})
	if err != nil {
		return err
	}
	e.Writer = w
	e.Opts.ServerDryRunAll = true
	return nil
}
