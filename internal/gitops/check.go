// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/fluxcd/pkg/ssa/normalize"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/decrypt"
	"github.com/trainops/trainops/render"
)

// validate checks every rendered object before anything is applied (see
// package check), and prepares those that pass for applying.
func (e *Engine) validate(objs []render.Object, revision string) ([]*desired, error) {
	syncName := e.SyncLabel()
	out, problems := check.Objects(objs, e.Opts.AllowedKinds, e.policy(), e.Mapper, func(p check.Passed) (*desired, error) {
		// The rendered objects are the sync's alone: they are prepared in
		// place rather than copied.
		d := &desired{obj: p.Unstructured, file: p.File, gvk: p.GVK, mapping: p.Mapping, namespace: p.GetNamespace(), name: p.GetName()}
		d.key = Entry{Group: p.GVK.Group, Kind: p.GVK.Kind, Namespace: d.namespace, Name: d.name}.Key()
		if err := prepare(d, syncName, e.Keys, e.previewing); err != nil {
			return nil, err
		}
		return d, nil
	})
	if len(problems) > 0 {
		return nil, &SyncError{Reason: ReasonValidationFailed, Revision: revision, Problems: problems}
	}
	return out, nil
}

// encodeBodies encodes the apply body of each object the plan found
// changed, on every core, before the dry-run and the apply, where the API
// server wants the CPU. Only the changed: after a push of one file the
// others' bodies would be thousands of copies of the revision held for
// nothing.
func (e *Engine) encodeBodies(ctx context.Context, changed []*desired) error {
	// Each worker writes only its own object's body.
	problems := e.each(ctx, changed, func(_ context.Context, d *desired) *Problem {
		var err error
		if d.body, err = json.Marshal(d.obj.Object); err != nil {
			return &Problem{Object: d.id(), Message: "encode: " + err.Error()}
		}
		return nil
	})
	if len(problems) > 0 {
		return fmt.Errorf("%s", problems[0])
	}
	return nil
}

// policy is the engine's: with its protected namespaces, the cluster's own
// and its inventory's.
func (e *Engine) policy() check.Policy {
	return check.Policy{AllowedNamespaces: e.Opts.AllowedNamespaces, ProtectedNamespaces: check.ProtectedNamespaces(e.Opts.ProtectedNamespaces, cmp.Or(e.Opts.Home, e.Opts.Namespace)), Workload: e.Opts.Workload, NamespacedOnly: e.Opts.NamespacedOnly,
		DecryptKinds: e.Opts.DecryptKinds}
}

// prepare labels the object with its sync and records the hash of its
// configuration. A SOPS-encrypted object is hashed as Git holds it (the
// hash, in an annotation anyone who reads the object sees, says nothing
// of its values), then decrypted with keys; without keys it is refused,
// or kept encrypted for a preview.
func prepare(d *desired, syncName string, keys *decrypt.Keys, preview bool) error {
	u := d.obj
	unstructured.RemoveNestedField(u.Object, "status")
	encrypted := decrypt.Encrypted(u.Object)
	if encrypted && keys == nil && !preview {
		return errNoKeys
	}
	// Fill the defaults the API server would for built-in kinds (Service
	// and container port protocols...), so what is hashed and compared is
	// what the server stores. Not for an encrypted object: its values are
	// not yet what the server will store.
	if !encrypted {
		if err := normalize.Unstructured(u); err != nil {
			return err
		}
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
	if encrypted && keys != nil && !preview {
		return decryptPrepared(u, keys)
	}
	return nil
}

// errNoKeys refuses an encrypted object of a sync without keys.
var errNoKeys = errors.New("it is SOPS-encrypted, and this sync has no decryption keys: name a Secret holding an age identity (an entry ending in " + decrypt.KeySuffix + ") in decryption.secretRef")

// decryptPrepared decrypts u in place, and fills the server's defaults
// into what it decrypts to.
func decryptPrepared(u *unstructured.Unstructured, keys *decrypt.Keys) error {
	plain, err := keys.Decrypt(u.Object)
	if err != nil {
		return err
	}
	u.Object = plain
	return normalize.Unstructured(u)
}

// Prepare returns obj as the sync with label value syncLabel (its
// inventory's namespace) would apply it: its sync label and applied-hash
// annotation set, built-in defaults filled. The live diff uses it so it
// compares exactly what a sync would send.
func Prepare(obj *unstructured.Unstructured, syncLabel string) (*unstructured.Unstructured, error) {
	d := &desired{obj: obj.DeepCopy()}
	if err := prepare(d, syncLabel, nil, false); err != nil {
		return nil, err
	}
	return d.obj, nil
}
