// SPDX-License-Identifier: Apache-2.0

// Package offline renders, validates and expands a training-config
// repository without a cluster, for `trainops render`, `validate` and
// `diff`. It uses the sync's own checks, the API server's own schema and
// CEL validation, and the reconcilers' own builders: nothing is computed a
// second way.
package offline

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	goruntime "runtime"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/apierr"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/crdschema"
	"github.com/trainops/trainops/internal/workload"
	"github.com/trainops/trainops/render"
)

// Options for offline work.
type Options struct {
	// AllowedKinds may appear in the repository (default the sync's).
	AllowedKinds []schema.GroupKind
	// AllowedNamespaces, when set, limit the namespaces as the sync does.
	AllowedNamespaces []string
	// ProtectedNamespaces are refused as the sync does, beside
	// check.AlwaysProtected.
	ProtectedNamespaces []string
	// Workload is the sync's workload policy.
	Workload workload.Policy
	// Builder options for expanding (the agent image).
	Builder builder.Options
	// GPUNodes are the GPU nodes a ClusterPolicy's stack is expanded for:
	// it has a driver DaemonSet per OS among them.
	GPUNodes builder.GPUNodes
	// CRDs are other projects' CRDs (Kueue's, the Prometheus Operator's):
	// objects of their kinds are validated against them as trainops's own
	// are, instead of refused as unknown.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// Render bounds each render as the sync's render settings do (zero
	// fields: the defaults).
	Render render.Limits
	// DecryptKinds are the kinds whose SOPS-encrypted objects the sync
	// decrypts (nil: check.DefaultDecryptKinds); offline, such an object
	// is checked to be well-formed, never decrypted.
	DecryptKinds []schema.GroupKind
}

// Problem is one reason a repository is invalid.
type Problem = check.Problem

// InvalidError lists everything wrong with a repository.
type InvalidError struct {
	Problems []Problem
}

func (e *InvalidError) Error() string {
	if len(e.Problems) == 1 {
		return "invalid: " + e.Problems[0].String()
	}
	msg := fmt.Sprintf("invalid: %d problems:", len(e.Problems))
	for _, p := range e.Problems {
		msg += "\n  - " + p.String()
	}
	return msg
}

// unknownKind says why a kind is unknown offline: neither trainops's nor
// built in, and no CRD given for it.
const unknownKind = "no schema for it: give its CRD with --crds DIR (or --cluster, to take the cluster's)"

// Loader renders and validates repositories offline.
type Loader struct {
	schemas *crdschema.Schemas
	opts    Options
	// parsed, when set, keeps the files each render parses (KeepParsed).
	parsed *render.Cache
}

// KeepParsed makes the loader keep what each render parses of a file, so
// a render of another revision parses only the files that differ: for
// diff, which renders two.
func (l *Loader) KeepParsed() { l.parsed = &render.Cache{} }

// DecryptKinds are the kinds whose encrypted objects the loader's sync
// would decrypt (nil: check.DefaultDecryptKinds).
func (l *Loader) DecryptKinds() []schema.GroupKind { return l.opts.DecryptKinds }

// NewLoader reads the CRDs embedded in the binary, and opts.CRDs.
func NewLoader(opts Options) (*Loader, error) {
	s, err := crdschema.LoadWith(opts.CRDs)
	if err != nil {
		return nil, err
	}
	if len(opts.AllowedKinds) == 0 {
		opts.AllowedKinds = check.DefaultAllowedKinds
	}
	return &Loader{schemas: s, opts: opts}, nil
}

// Load renders path of the checkout at root and validates every object as
// the sync and the API server would; trainops's kinds come back with their
// CRD defaults filled in. An invalid repository is an *InvalidError naming
// each file, object and field.
func (l *Loader) Load(root, path string) ([]render.Object, error) {
	objs, err := l.Render(root, path)
	if err != nil {
		return nil, err
	}
	return objs, l.Check(objs, nil)
}

// Render renders path of the checkout at root, without checking the
// objects: Load, in two steps.
func (l *Loader) Render(root, path string) ([]render.Object, error) {
	objs, err := render.RenderCached(context.Background(), root, path, l.opts.Render, l.parsed)
	if err != nil {
		var re *render.Error
		if errors.As(err, &re) {
			return nil, &InvalidError{Problems: []Problem{{File: re.File, Message: re.Err.Error()}}}
		}
		return nil, err
	}
	return objs, nil
}

// Check checks objs as the sync and the API server would, and fills in the
// CRD defaults of trainops's kinds. An object known valid (known(o)
// true: the same object in another revision passed) is not validated
// against its schema again; the checks of the whole set still run.
func (l *Loader) Check(objs []render.Object, known func(render.Object) bool) error {
	_, problems := check.Objects(objs, l.opts.AllowedKinds, check.Policy{AllowedNamespaces: l.opts.AllowedNamespaces, ProtectedNamespaces: check.ProtectedNamespaces(l.opts.ProtectedNamespaces, ""), Workload: l.opts.Workload, UnknownKind: unknownKind, DecryptKinds: l.opts.DecryptKinds}, l.schemas.OfflineMapper(), check.Normalized)
	// One mistake, one problem: an object the checks refused is not
	// validated against its schema too.
	refused := map[string]bool{}
	for _, p := range problems {
		refused[p.File+"\x00"+p.Object] = true
	}
	// Schema validation (CEL rules included) is the costly part: on every
	// core, the problems kept in the objects' order.
	invalid := make([]error, len(objs))
	onEveryCore(len(objs), func(i int) {
		o := objs[i]
		if !l.schemas.Knows(o.GroupVersionKind()) || refused[o.File+"\x00"+o.ID()] || (known != nil && known(o)) {
			return
		}
		invalid[i] = l.schemas.Validate(context.Background(), o.Unstructured, nil)
	})
	for i, err := range invalid {
		if err != nil {
			problems = append(problems, Problem{File: objs[i].File, Object: objs[i].ID(), Message: apierr.Message(err)})
		}
	}
	if len(problems) > 0 {
		return &InvalidError{Problems: problems}
	}
	return nil
}

// CheckUpdate reports whether the API server would accept changing old into
// obj (for example a PyJob's immutable spec): nil, or its message.
func (l *Loader) CheckUpdate(obj, old *unstructured.Unstructured) error {
	if !l.schemas.Knows(obj.GroupVersionKind()) {
		return nil
	}
	return l.schemas.Validate(context.Background(), obj.DeepCopy(), old.DeepCopy())
}

// Item is an object of the repository or a child the reconcilers would
// create for one; Owner is "Kind/namespace/name" for children.
type Item struct {
	Object *unstructured.Unstructured
	File   string
	Owner  string
}

// Expand lists every object with, after each custom resource, the children
// its reconciler would create, in a stable order.
func (l *Loader) Expand(objs []render.Object) ([]Item, error) {
	return l.ExpandChanged(objs, nil)
}

// ExpandChanged is Expand, leaving out the children of the PyJobs and
// SREAgents same(o) says are the same in the revision compared with: their
// children depend only on them, so they are the same too.
func (l *Loader) ExpandChanged(objs []render.Object, same func(render.Object) bool) ([]Item, error) {
	var items []Item
	activePolicy := ""
	for _, o := range objs {
		if o.GroupVersionKind().GroupKind() == gpuv1alpha1.GroupVersion.WithKind(gpuv1alpha1.ClusterPolicyKind).GroupKind() {
			if activePolicy == "" || o.GetName() < activePolicy {
				activePolicy = o.GetName()
			}
		}
	}
	for _, o := range objs {
		items = append(items, Item{Object: o.Unstructured, File: o.File})
		if same != nil && o.GroupVersionKind().GroupKind() != gpuv1alpha1.GroupVersion.WithKind(gpuv1alpha1.ClusterPolicyKind).GroupKind() && same(o) {
			continue
		}
		children, err := l.children(o.Unstructured, activePolicy)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", o.File, o.ID(), err)
		}
		owner := ownerString(o.Unstructured)
		for _, c := range children {
			u, err := builder.ToUnstructured(c)
			if err != nil {
				return nil, err
			}
			items = append(items, Item{Object: u, File: o.File, Owner: owner})
		}
	}
	return items, nil
}

func ownerString(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetKind() + "/" + u.GetName()
	}
	return u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
}

// children builds what the reconcilers would create for u. A ClusterPolicy
// other than the active one (the first by name here; the oldest in a
// cluster) gets none.
func (l *Loader) children(u *unstructured.Unstructured, activePolicy string) ([]client.Object, error) {
	switch u.GroupVersionKind() {
	case trainingv1alpha1.GroupVersion.WithKind(trainingv1alpha1.PyJobKind):
		pj := &trainingv1alpha1.PyJob{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, pj); err != nil {
			return nil, err
		}
		c, err := builder.ForPyJob(pj)
		if err != nil {
			return nil, err
		}
		return c.Objects(), nil
	case aiopsv1alpha1.GroupVersion.WithKind(aiopsv1alpha1.SREAgentKind):
		a := &aiopsv1alpha1.SREAgent{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, a); err != nil {
			return nil, err
		}
		return builder.ForSREAgent(a, l.opts.Builder).Objects(), nil
	case gpuv1alpha1.GroupVersion.WithKind(gpuv1alpha1.ClusterPolicyKind):
		if u.GetName() != activePolicy {
			return nil, nil
		}
		cp := &gpuv1alpha1.ClusterPolicy{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cp); err != nil {
			return nil, err
		}
		return builder.ForClusterPolicy(cp, l.opts.GPUNodes).AllObjects(), nil
	}
	return nil, nil
}

// Key identifies an item across revisions.
func Key(u *unstructured.Unstructured) string {
	gvk := u.GroupVersionKind()
	return gvk.Group + "/" + gvk.Kind + "/" + u.GetNamespace() + "/" + u.GetName()
}

// SortItems orders items by key, for outputs that must not depend on file
// layout.
func SortItems(items []Item) {
	sort.SliceStable(items, func(i, j int) bool { return Key(items[i].Object) < Key(items[j].Object) })
}

// Warnings are the fields of objs that are valid but will not do what they
// seem to (see builder.StorageWarnings). They never make a repository
// invalid.
func Warnings(objs []render.Object) []Problem {
	var out []Problem
	for _, o := range objs {
		if o.GroupVersionKind() != trainingv1alpha1.GroupVersion.WithKind(trainingv1alpha1.PyJobKind) {
			continue
		}
		var pj trainingv1alpha1.PyJob
		if runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &pj) != nil {
			continue
		}
		for _, w := range builder.StorageWarnings(&pj) {
			out = append(out, Problem{File: o.File, Object: o.ID(), Message: w.String()})
		}
	}
	return out
}

// Unchanged finds the objects both revisions render the same (by Key),
// makes each one object, the head's, in both lists, and returns the set
// of them. The diff validates such an object once, in the head (so the
// base's holds the same CRD defaults), and builds its children (which
// depend only on it) in neither revision: a one-file change to a large
// repository costs one object's work.
func Unchanged(base, head []render.Object) map[*unstructured.Unstructured]bool {
	byKey := make(map[string]int, len(base))
	for i, o := range base {
		byKey[Key(o.Unstructured)] = i
	}
	at := make([]int, len(head))
	onEveryCore(len(head), func(i int) {
		at[i] = -1
		// Rendered objects hold only JSON values, so reflect's equality
		// is the semantic one, and much cheaper.
		if b, ok := byKey[Key(head[i].Unstructured)]; ok && reflect.DeepEqual(base[b].Object, head[i].Object) {
			at[i] = b
		}
	})
	same := make(map[*unstructured.Unstructured]bool, len(head))
	for i, b := range at {
		if b >= 0 {
			base[b].Unstructured = head[i].Unstructured
			same[head[i].Unstructured] = true
		}
	}
	return same
}

// onEveryCore calls f(0) … f(n-1) on every core, for work on each object
// of a repository that depends on that object alone.
func onEveryCore(n int, f func(i int)) {
	workqueue.ParallelizeUntil(context.Background(), goruntime.GOMAXPROCS(0), n, f)
}
