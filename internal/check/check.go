// SPDX-License-Identifier: Apache-2.0

// Package check holds the checks every rendered object of a revision must
// pass before anything is applied: allowed kind, a kind the cluster
// serves, namespace present exactly when the kind is namespaced,
// namespace allowed and not protected, the workload policy, a
// SOPS-encrypted object of a kind decrypted and well-formed, no
// duplicates. The sync engine, `trainops validate`, `render` and `diff`
// run the same checks.
package check

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/ssa/normalize"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"

	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/convert"
	"github.com/trainops/trainops/internal/decrypt"
	"github.com/trainops/trainops/internal/textsafe"
	"github.com/trainops/trainops/render"
)

// DefaultAllowedKinds are the kinds a training-config repository may hold.
var DefaultAllowedKinds = []schema.GroupKind{
	{Group: "training.trainops.dev", Kind: "PyJob"},
	{Group: "aiops.trainops.dev", Kind: "SREAgent"},
	{Group: "gpu.trainops.dev", Kind: "ClusterPolicy"},
	{Group: "", Kind: "Namespace"},
	{Group: "", Kind: "ConfigMap"},
	{Group: "", Kind: "PersistentVolumeClaim"},
}

// Problem is one reason a revision was refused, naming the object and file.
type Problem struct {
	File    string
	Object  string
	Message string
	// Owner is, for an object a sync refused to take over, the sync label
	// of the sync it belongs to (empty when none does).
	Owner string
}

// String is the problem for people: file, object and message, each
// escaped (textsafe.Text), as a repository's names and values are a
// team's text.
func (p Problem) String() string {
	p.File, p.Object, p.Message = textsafe.Text(p.File), textsafe.Text(p.Object), textsafe.Text(p.Message)
	switch {
	case p.File != "" && p.Object != "":
		return fmt.Sprintf("%s: %s: %s", p.File, p.Object, p.Message)
	case p.File != "":
		return p.File + ": " + p.Message
	case p.Object != "":
		return p.Object + ": " + p.Message
	}
	return p.Message
}

// GVKString is "group/version/Kind" ("version/Kind" for the core group).
func GVKString(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Version + "/" + gvk.Kind
	}
	return gvk.Group + "/" + gvk.Version + "/" + gvk.Kind
}

// Passed is an object that passed the checks, in the revision's order.
type Passed struct {
	render.Object
	GVK schema.GroupVersionKind
	// Mapping is the kind's REST mapping, as the checks found it.
	Mapping *meta.RESTMapping
}

// Objects checks objs. mapper may be offline (crdschema.OfflineMapper).
// prepare then runs on each object that passed, on every core, and makes
// what the caller keeps of it; its error refuses that object like a failed
// check. The problems keep the objects' order.
func Objects[T any](objs []render.Object, allowedKinds []schema.GroupKind, policy Policy, mapper meta.RESTMapper, prepare func(Passed) (T, error)) ([]T, []Problem) {
	nsAllowed := map[string]bool{}
	for _, ns := range policy.AllowedNamespaces {
		nsAllowed[ns] = true
	}
	nsProtected := map[string]bool{}
	for _, ns := range policy.ProtectedNamespaces {
		nsProtected[ns] = true
	}
	allowed := map[schema.GroupKind]bool{}
	for _, gk := range allowedKinds {
		allowed[gk] = true
	}
	names := config.KindNames(allowedKinds)
	defined := definedInRevision(objs)
	seen := map[string]string{}
	var problems []Problem
	type candidate struct {
		p  Passed
		at int // problems before it
	}
	var cands []candidate
	// One mapping per kind: the mapper's answer allocates on every call,
	// and a revision holds thousands of objects of a few kinds.
	type mapped struct {
		m   *meta.RESTMapping
		err error
	}
	mappings := map[schema.GroupVersionKind]mapped{}
	mappingOf := func(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
		r, ok := mappings[gvk]
		if !ok {
			r.m, r.err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			mappings[gvk] = r
		}
		return r.m, r.err
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		problem := func(msg string) { problems = append(problems, Problem{File: o.File, Object: o.ID(), Message: msg}) }
		if to, seed := convert.Seeds[gvk.GroupKind()]; seed {
			problem(fmt.Sprintf("kind %s is the %s of the operator trainops replaces: trainops's is apiVersion %s; `trainops convert -w %s` rewrites it", GVKString(gvk), gvk.Kind, to.GroupVersion(), o.File))
			continue
		}
		if !allowed[gvk.GroupKind()] {
			problem(fmt.Sprintf("kind %s is not allowed in the repository (allowed: %s)", GVKString(gvk), strings.Join(names, ", ")))
			continue
		}
		mapping, err := mappingOf(gvk)
		if crd, ok := defined[gvk.GroupKind()]; err != nil && ok {
			// A sync does not wait for a CustomResourceDefinition to be
			// served before it checks the resources of the same revision.
			problem(fmt.Sprintf("kind %s is defined by CustomResourceDefinition %s in this same revision, which the cluster does not serve yet: "+
				"install the CustomResourceDefinition first (in its own revision, or with the platform's tooling), then the resources", GVKString(gvk), crd))
			continue
		}
		if err != nil {
			problem(fmt.Sprintf("unknown kind %s: %s", GVKString(gvk), cmp.Or(policy.UnknownKind, "the cluster does not serve it")))
			continue
		}
		namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
		switch {
		case namespaced && o.GetNamespace() == "":
			problem("metadata.namespace is required for a namespaced kind: set it, or namespace: in the kustomization that lists this file")
			continue
		case !namespaced && o.GetNamespace() != "":
			problem(fmt.Sprintf("%s is cluster-scoped: remove metadata.namespace", gvk.Kind))
			continue
		case !namespaced && policy.NamespacedOnly:
			problem(fmt.Sprintf("%s is cluster-scoped, and this sync may write only into its own namespace: give it a serviceAccountName allowed to write %s", gvk.Kind, gvk.Kind))
			continue
		}
		ns, field := writesInto(o.Unstructured, gvk)
		if nsProtected[ns] {
			problem(fmt.Sprintf("%snamespace %s is protected: a sync never writes there (protected: %s)", field, ns, strings.Join(policy.ProtectedNamespaces, ", ")))
			continue
		}
		if len(nsAllowed) > 0 && ns != "" && !nsAllowed[ns] {
			problem(fmt.Sprintf("%snamespace %s is not allowed in the repository (allowed: %s)", field, ns, strings.Join(policy.AllowedNamespaces, ", ")))
			continue
		}
		if refused := policy.Workload.Check(o.Unstructured, gvk.GroupKind()); len(refused) > 0 {
			for _, m := range refused {
				problem(m)
			}
			continue
		}
		if decrypt.Encrypted(o.Object) {
			if kinds := policy.decryptKinds(); !slices.Contains(kinds, gvk.GroupKind()) {
				problem(fmt.Sprintf("it is SOPS-encrypted, and only objects of the kinds decryption.kinds names are decrypted (%s): add %s to it, or keep the object in the clear", strings.Join(config.KindNames(kinds), ", "), config.KindNames([]schema.GroupKind{gvk.GroupKind()})[0]))
				continue
			}
			if err := decrypt.Check(o.Object); err != nil {
				problem(err.Error())
				continue
			}
		}
		key := strings.Join([]string{gvk.Group, gvk.Kind, o.GetNamespace(), o.GetName()}, "/")
		if first, dup := seen[key]; dup {
			problem("defined twice (also in " + first + ")")
			continue
		}
		seen[key] = o.File
		cands = append(cands, candidate{p: Passed{Object: o, GVK: gvk, Mapping: mapping}, at: len(problems)})
	}
	errs := make([]error, len(cands))
	made := make([]T, len(cands))
	workqueue.ParallelizeUntil(context.Background(), runtime.GOMAXPROCS(0), len(cands), func(i int) { made[i], errs[i] = prepare(cands[i].p) })
	var out []T
	var merged []Problem
	prev := 0
	for i, c := range cands {
		if errs[i] == nil {
			out = append(out, made[i])
			continue
		}
		merged = append(merged, problems[prev:c.at]...)
		prev = c.at
		merged = append(merged, Problem{File: c.p.File, Object: c.p.ID(), Message: errs[i].Error()})
	}
	return out, append(merged, problems[prev:]...)
}

// Normalized is a prepare for Objects that keeps the objects as they are,
// refusing those the API server's defaulting could not handle.
func Normalized(p Passed) (Passed, error) {
	return p, normalize.Unstructured(p.Unstructured.DeepCopy())
}

// definedInRevision maps the kinds the revision's CustomResourceDefinitions
// define to the CustomResourceDefinitions' names.
func definedInRevision(objs []render.Object) map[schema.GroupKind]string {
	out := map[schema.GroupKind]string{}
	for _, o := range objs {
		if o.GroupVersionKind().GroupKind() != (schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}) {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		if kind != "" {
			out[schema.GroupKind{Group: group, Kind: kind}] = o.GetName()
		}
	}
	return out
}
