package gitops

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/fluxcd/pkg/ssa/normalize"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/par"
	"github.com/trainops/trainops/render"
)

// validate checks every rendered object before anything is applied.
func (e *Engine) validate(objs []render.Object, revision string) ([]*desired, error) {
	// The rendered objects are the sync's alone: prepare them in place
	// rather than hold a second copy of the revision.
	out, problems := check(objs, e.Opts.AllowedKinds, e.policy(), e.Mapper, e.SyncLabel(), true)
	if len(problems) > 0 {
		return nil, &SyncError{Reason: ReasonValidationFailed, Revision: revision, Problems: problems}
	}
	return out, nil
}

// CheckObjects runs the checks every revision must pass before anything is
// applied: allowed kind, known kind, namespace present exactly when the kind
// is namespaced, namespace allowed and not protected, the workload policy,
// no duplicates. mapper
// may be offline (crdschema.OfflineMapper).
func CheckObjects(objs []render.Object, allowed []schema.GroupKind, policy Policy, mapper meta.RESTMapper) []Problem {
	_, problems := check(objs, allowed, policy, mapper, "", false)
	return problems
}

// check runs CheckObjects's checks and prepares each object for applying;
// inPlace, for a sync, prepares objs themselves instead of copies and
// encodes each one's apply body.
func check(objs []render.Object, allowedKinds []schema.GroupKind, policy Policy, mapper meta.RESTMapper, syncName string, inPlace bool) ([]*desired, []Problem) {
	nsAllowed := map[string]bool{}
	for _, ns := range policy.AllowedNamespaces {
		nsAllowed[ns] = true
	}
	nsProtected := map[string]bool{}
	for _, ns := range policy.ProtectedNamespaces {
		nsProtected[ns] = true
	}
	allowed := map[schema.GroupKind]bool{}
	var names []string
	for _, gk := range allowedKinds {
		allowed[gk] = true
		names = append(names, gk.Kind)
	}
	seen := map[string]string{}
	var problems []Problem
	var out []*desired
	var cands []candidate
	defined := definedInRevision(objs)
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if !allowed[gvk.GroupKind()] {
			problems = append(problems, Problem{File: o.File, Object: o.ID(), Message: fmt.Sprintf("kind %s is not allowed in the repository (allowed: %s)", gvkString(gvk), strings.Join(names, ", "))})
			continue
		}
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if crd, ok := defined[gvk.GroupKind()]; err != nil && ok {
			// A sync does not wait for a CustomResourceDefinition to be
			// served before it checks the resources of the same revision.
			problems = append(problems, Problem{File: o.File, Object: o.ID(), Message: fmt.Sprintf(
				"kind %s is defined by CustomResourceDefinition %s in this same revision, which the cluster does not serve yet: "+
					"install the CustomResourceDefinition first (in its own revision, or with the platform's tooling), then the resources", gvkString(gvk), crd)})
			continue
		}
		if err != nil {
			problems = append(problems, Problem{File: o.File, Object: o.ID(), Message: fmt.Sprintf("unknown kind %s: the cluster does not serve it", gvkString(gvk))})
			continue
		}
		namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
		switch {
		case namespaced && o.GetNamespace() == "":
			problems = append(problems, Problem{File: o.File, Object: o.ID(), Message: "metadata.namespace is required for a namespaced kind"})
			continue
		case !namespaced && o.GetNamespace() != "":
			problems = append(problems, Problem{File: o.File, Object: o.ID(), Message: fmt.Sprintf("%s is cluster-scoped: remove metadata.namespace", gvk.Kind)})
			continue
		}
		ns, field := writesInto(o.Unstructured, gvk)
		if nsProtected[ns] {
			problems = append(problems, Problem{File: o.File, Object: o.ID(), Message: fmt.Sprintf("%snamespace %s is protected: a sync never writes there (protected: %s)", field, ns, strings.Join(policy.ProtectedNamespaces, ", "))})
			continue
		}
		if len(nsAllowed) > 0 && ns != "" && !nsAllowed[ns] {
			problems = append(problems, Problem{File: o.File, Object: o.ID(), Message: fmt.Sprintf("%snamespace %s is not allowed in the repository (allowed: %s)", field, ns, strings.Join(policy.AllowedNamespaces, ", "))})
			continue
		}
		if refused := policy.Workload.check(o.Unstructured, gvk.GroupKind()); len(refused) > 0 {
			for _, m := range refused {
				problems = append(problems, Problem{File: o.File, Object: o.ID(), Message: m})
			}
			continue
		}
		obj := o.Unstructured
		if !inPlace {
			obj = obj.DeepCopy()
		}
		d := &desired{obj: obj, file: o.File, gvk: gvk}
		d.key = Entry{Group: gvk.Group, Kind: gvk.Kind, Namespace: o.GetNamespace(), Name: o.GetName()}.Key()
		if first, dup := seen[d.key]; dup {
			problems = append(problems, Problem{File: o.File, Object: o.ID(), Message: "defined twice (also in " + first + ")"})
			continue
		}
		seen[d.key] = o.File
		cands = append(cands, candidate{d: d, at: len(problems), id: o.ID()})
	}
	// Prepare on every core; the problems keep the objects' order.
	errs := make([]error, len(cands))
	par.Each(len(cands), func(i int) {
		d := cands[i].d
		if errs[i] = prepare(d, syncName); errs[i] == nil && inPlace {
			// The sync's objects: their apply bodies are encoded here, on
			// every core, rather than during the apply, where the API
			// server wants the CPU.
			d.body, errs[i] = json.Marshal(d.obj.Object)
		}
	})
	var merged []Problem
	prev := 0
	for i, c := range cands {
		if errs[i] == nil {
			out = append(out, c.d)
			continue
		}
		merged = append(merged, problems[prev:c.at]...)
		prev = c.at
		merged = append(merged, Problem{File: c.d.file, Object: c.id, Message: errs[i].Error()})
	}
	return out, append(merged, problems[prev:]...)
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

// candidate is an object that passed check's first checks, and how many
// problems came before it.
type candidate struct {
	d  *desired
	at int
	id string
}

func gvkString(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Version + "/" + gvk.Kind
	}
	return gvk.Group + "/" + gvk.Version + "/" + gvk.Kind
}

// prepare labels the object with its sync and records the hash of its
// configuration.
func prepare(d *desired, syncName string) error {
	u := d.obj
	unstructured.RemoveNestedField(u.Object, "status")
	// Fill the defaults the API server would for built-in kinds (Service
	// and container port protocols...), so what is hashed and compared is
	// what the server stores.
	if err := normalize.Unstructured(u); err != nil {
		return err
	}
	labels := u.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelSync] = syncName
	u.SetLabels(labels)
	ann := u.GetAnnotations()
	delete(ann, builder.AnnotationAppliedHash)
	if len(ann) == 0 {
		ann = nil
	}
	u.SetAnnotations(ann)
	b, _ := json.Marshal(u.Object) // map keys sorted: stable
	h := fnv.New64a()
	_, _ = h.Write(b)
	d.hash = fmt.Sprintf("%016x", h.Sum64())
	if ann == nil {
		ann = map[string]string{}
	}
	ann[builder.AnnotationAppliedHash] = d.hash
	u.SetAnnotations(ann)
	return nil
}

// Prepare returns obj as the sync with label value syncLabel (its
// inventory's namespace) would apply it: its sync label and applied-hash
// annotation set, built-in defaults filled. The live diff uses it so it
// compares exactly what a sync would send.
func Prepare(obj *unstructured.Unstructured, syncLabel string) (*unstructured.Unstructured, error) {
	d := &desired{obj: obj.DeepCopy()}
	if err := prepare(d, syncLabel); err != nil {
		return nil, err
	}
	return d.obj, nil
}
