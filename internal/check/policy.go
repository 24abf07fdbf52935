// SPDX-License-Identifier: Apache-2.0

package check

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/workload"
)

// AlwaysProtected are the namespaces no sync ever writes into (or
// declares): the cluster's own. trainops's namespace is added to them.
var AlwaysProtected = []string{"kube-system", "kube-public", "kube-node-lease"}

// Policy says where a revision's objects may be and what they may ask for.
type Policy struct {
	// AllowedNamespaces, when set, are the only namespaces objects may be
	// in.
	AllowedNamespaces []string
	// ProtectedNamespaces are never written, whatever AllowedNamespaces
	// says.
	ProtectedNamespaces []string
	Workload            workload.Policy
	// NamespacedOnly refuses objects of cluster-scoped kinds.
	NamespacedOnly bool
	// UnknownKind says, after "unknown kind X: ", why a kind is unknown
	// and what makes it known (default: the cluster does not serve it).
	UnknownKind string
	// DecryptKinds are the kinds whose SOPS-encrypted objects are
	// decrypted (nil: DefaultDecryptKinds); an encrypted object of any
	// other kind is refused.
	DecryptKinds []schema.GroupKind
}

// DefaultDecryptKinds are the kinds decrypted when no setting names any.
var DefaultDecryptKinds = []schema.GroupKind{{Kind: "Secret"}}

func (p Policy) decryptKinds() []schema.GroupKind {
	if p.DecryptKinds == nil {
		return DefaultDecryptKinds
	}
	return p.DecryptKinds
}

// ProtectedNamespaces is extra, AlwaysProtected and trainops's own
// namespace: the list a setting can only grow.
func ProtectedNamespaces(extra []string, own string) []string {
	out := append(append([]string{}, AlwaysProtected...), extra...)
	if own != "" {
		out = append(out, own)
	}
	return out
}

// writesInto is the namespace an object puts things in, and the field that
// says so when it is not metadata.namespace: a Namespace is its own; a
// ClusterPolicy, cluster-scoped, runs the GPU stack's DaemonSets in
// spec.namespace.
func writesInto(u *unstructured.Unstructured, gvk schema.GroupVersionKind) (string, string) {
	switch {
	case gvk.Group == "" && gvk.Kind == "Namespace":
		return u.GetName(), ""
	case gvk.Group == gpuv1alpha1.GroupVersion.Group && gvk.Kind == gpuv1alpha1.ClusterPolicyKind:
		ns, _, _ := unstructured.NestedString(u.Object, "spec", "namespace")
		if ns == "" {
			ns = builder.DefaultGPUNamespace
		}
		return ns, "spec.namespace: "
	}
	return u.GetNamespace(), ""
}
