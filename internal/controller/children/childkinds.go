// SPDX-License-Identifier: Apache-2.0

package children

import (
	"reflect"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	nodev1ac "k8s.io/client-go/applyconfigurations/node/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/builder"
)

// driftStrategy is how a child trainops applied before is checked for
// changes made by someone else.
type driftStrategy int

const (
	// deducedCompare: the fields trainops owns are compared by a schema
	// deduced from the object, every list whole: a kind without a row
	// (the ServiceMonitor, which has no Go type).
	deducedCompare driftStrategy = iota
	// notCompared: created, never applied again; the kind's spec cannot
	// change once created. A new child is created, one request where a
	// look-up and an apply would be two; the create fails when the name is
	// taken. The fields a create gives trainops (as an Update, not an
	// Apply) never need an apply to remove them, as the spec never changes.
	notCompared
	// typedCompare: the fields trainops owns are read out of the cached
	// child with the kind's schema (extract) and compared in memory.
	typedCompare
	// managedFields: the cache keeps the child as metadata only; the
	// fields trainops's apply entry still owns are compared
	// (unownedFields), of which the cache keeps a hash.
	managedFields
)

// childKind is everything that depends on a child's kind, in one row:
// how a new one is written, how the informer cache keeps it, and how it
// is compared once applied. A kind without a row (the ServiceMonitor,
// which has no Go type) is read live, applied, and compared by a schema
// deduced from the object.
type childKind struct {
	// obj is an empty object of the kind, and gk its group and kind.
	obj   client.Object
	gk    schema.GroupKind
	drift driftStrategy
	// extract reads the fields trainops owns out of a live child
	// (typedCompare): a keyed list (containers, env) is compared by key,
	// an atomic one (a Role's rules, a container's args) whole.
	extract func(client.Object) (any, error)
	// transform is the informer cache's transform of the kind.
	transform cache.TransformFunc
}

// childKinds are the kinds of child trainops caches: only its own, by
// its managed-by label.
var childKinds = []childKind{
	// A PyJob's Job and output claim, made by the thousand.
	{obj: &batchv1.Job{}, gk: schema.GroupKind{Group: "batch", Kind: "Job"}, drift: notCompared, transform: cachedJob},
	{obj: &corev1.PersistentVolumeClaim{}, gk: schema.GroupKind{Kind: "PersistentVolumeClaim"}, drift: notCompared, transform: withoutManagedFields},
	// A PyJob's headless Service, one per PyJob: its spec, never read,
	// was more than half of what each cost in the cache.
	{obj: &corev1.Service{}, gk: schema.GroupKind{Kind: "Service"}, drift: managedFields, transform: cachedService},
	typedKind(&appsv1.Deployment{}, "apps", "Deployment", func(o *appsv1.Deployment) (any, error) {
		return appsv1ac.ExtractDeployment(o, builder.FieldManager)
	}),
	typedKind(&appsv1.DaemonSet{}, "apps", "DaemonSet", func(o *appsv1.DaemonSet) (any, error) {
		return appsv1ac.ExtractDaemonSet(o, builder.FieldManager)
	}),
	typedKind(&corev1.ConfigMap{}, "", "ConfigMap", func(o *corev1.ConfigMap) (any, error) {
		return corev1ac.ExtractConfigMap(o, builder.FieldManager)
	}),
	typedKind(&corev1.ServiceAccount{}, "", "ServiceAccount", func(o *corev1.ServiceAccount) (any, error) {
		return corev1ac.ExtractServiceAccount(o, builder.FieldManager)
	}),
	typedKind(&rbacv1.Role{}, "rbac.authorization.k8s.io", "Role", func(o *rbacv1.Role) (any, error) {
		return rbacv1ac.ExtractRole(o, builder.FieldManager)
	}),
	typedKind(&rbacv1.RoleBinding{}, "rbac.authorization.k8s.io", "RoleBinding", func(o *rbacv1.RoleBinding) (any, error) {
		return rbacv1ac.ExtractRoleBinding(o, builder.FieldManager)
	}),
	typedKind(&rbacv1.ClusterRoleBinding{}, "rbac.authorization.k8s.io", "ClusterRoleBinding", func(o *rbacv1.ClusterRoleBinding) (any, error) {
		return rbacv1ac.ExtractClusterRoleBinding(o, builder.FieldManager)
	}),
	typedKind(&nodev1.RuntimeClass{}, "node.k8s.io", "RuntimeClass", func(o *nodev1.RuntimeClass) (any, error) {
		return nodev1ac.ExtractRuntimeClass(o, builder.FieldManager)
	}),
}

// typedKind is the row of a kind compared by its schema, cached whole with
// trainops's own managed-fields entry.
func typedKind[T client.Object](obj T, group, kind string, extract func(T) (any, error)) childKind {
	return childKind{obj: obj, gk: schema.GroupKind{Group: group, Kind: kind}, drift: typedCompare, transform: keepOwnFields,
		extract: func(o client.Object) (any, error) { return extract(o.(T)) }}
}

// Indexes of childKinds, by group and kind and by Go type.
var (
	kindByGK   = map[schema.GroupKind]*childKind{}
	kindByType = map[reflect.Type]*childKind{}
)

func init() {
	for i := range childKinds {
		k := &childKinds[i]
		kindByGK[k.gk] = k
		kindByType[reflect.TypeOf(k.obj)] = k
	}
}

// kindOf is gk's row; the zero row (applied, not cached by trainops,
// compared by a deduced schema) for a kind without one.
func kindOf(gk schema.GroupKind) childKind {
	if k, ok := kindByGK[gk]; ok {
		return *k
	}
	return childKind{gk: gk}
}

// createOnly reports whether a new child of k's kind is created rather
// than applied: it is never compared (notCompared).
func (k childKind) createOnly() bool { return k.drift == notCompared }

// driftChecked reports whether children like live are checked for drift.
func driftChecked(live client.Object) bool {
	switch live.(type) {
	case *unstructured.Unstructured, *metav1.PartialObjectMetadata:
		return true
	}
	k, ok := kindByType[reflect.TypeOf(live)]
	return ok && k.drift != notCompared
}
