// SPDX-License-Identifier: Apache-2.0

package clusterpolicy

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/install"
	"github.com/trainops/trainops/internal/testenv"
)

// TestTrainopsMayGrantTheMIGManagerItsRBAC: acting as a ServiceAccount
// bound to trainops's own ClusterRole (as `trainops install` prints it), the MIG
// manager's bindings and Role can be created: the ClusterRoleBinding to
// the installed ClusterRole through `bind` on that one name, the Role
// because trainops holds the same access to pods. The same account holds
// no `update` on nodes, cannot bind any other ClusterRole (cluster-admin),
// and cannot create a ClusterRole at all.
func TestTrainopsMayGrantTheMIGManagerItsRBAC(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	role, err := install.ClusterRole("trainops-manager")
	if err != nil {
		t.Fatal(err)
	}
	role.ResourceVersion = ""
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "nodes") && !slices.Equal(r.Verbs, []string{"get", "list", "patch", "watch"}) {
			t.Errorf("trainops's access to nodes is %v, want get, list, patch, watch", r.Verbs)
		}
	}
	role.Name = "trainops-manager-" + ns
	if err := k8s.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), role) })
	installMIGManagerRole(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "trainops"}}
	if err := k8s.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
	}
	if err := k8s.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), binding) })
	user, groups := testenv.ServiceAccountUser(ns, sa.Name)
	as, err := client.New(env.Impersonate(user, groups...), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		t.Fatal(err)
	}
	cp := &gpuv1alpha1.ClusterPolicy{}
	testenv.LoadCase(t, testenv.Seed("gpu-cluster-config"), cp)
	cp.Spec.Namespace = ns
	cp.Spec.MIGManager.Enabled = true
	cp.Spec.DevicePlugin.Config = nil
	granted := 0
	for _, o := range builder.ForClusterPolicy(cp, builder.OfflineGPUNodes).Objects {
		switch o.(type) {
		case *rbacv1.ClusterRole:
			t.Errorf("the ClusterPolicy's children include ClusterRole %s: trainops may not create ClusterRoles", o.GetName())
			continue
		case *rbacv1.ClusterRoleBinding, *rbacv1.Role, *rbacv1.RoleBinding:
		default:
			continue
		}
		o.SetOwnerReferences(nil)
		// Created for real: a binding's check reads the role it binds.
		testenv.Eventually(t, 10*time.Second, func() error { // RBAC caches settle
			return as.Create(ctx, o.DeepCopyObject().(client.Object))
		})
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
		granted++
	}
	// The MIG manager's binding, Role and RoleBinding; the validator's,
	// the toolkit's and the DCGM exporter's Role and RoleBinding.
	if granted != 9 {
		t.Fatalf("checked %d RBAC objects, want 9", granted)
	}
	// The validator and the toolkit find a driver container by listing
	// the namespace's DaemonSets, and may do no more than that.
	for _, name := range []string{"nvidia-operator-validator", "nvidia-container-toolkit"} {
		user, groups := testenv.ServiceAccountUser(ns, name)
		sa, err := client.New(env.Impersonate(user, groups...), client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, func() error {
			return sa.List(ctx, &appsv1.DaemonSetList{}, client.InNamespace(ns))
		})
		if err := sa.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
			t.Errorf("%s listing Secrets: %v, want Forbidden", name, err)
		}
	}
	forbidden := map[string]client.Object{
		"granting Secrets cluster-wide": &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "wider-" + ns},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}}},
		},
		"binding cluster-admin": &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "admin-" + ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
		},
	}
	for what, o := range forbidden {
		if err := as.Create(ctx, o, client.DryRunAll); !apierrors.IsForbidden(err) {
			t.Errorf("%s: err %v, want Forbidden", what, err)
		}
	}
	// Nodes: patch yes, update no.
	var nodes corev1.NodeList
	if err := as.List(ctx, &nodes, client.MatchingLabels{testenv.GPUNodeLabel: "true"}); err != nil || len(nodes.Items) == 0 {
		t.Fatalf("list GPU nodes: %d, err %v", len(nodes.Items), err)
	}
	node := &nodes.Items[0]
	if err := as.Update(ctx, node, client.DryRunAll); !apierrors.IsForbidden(err) {
		t.Errorf("updating a node: err %v, want Forbidden", err)
	}
	if err := as.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`)), client.DryRunAll); err != nil {
		t.Errorf("patching a node: %v", err)
	}
}
