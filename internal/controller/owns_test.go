// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/install"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

// waitStalledNotOwned waits for obj to be Stalled because a child's name
// is taken, and returns the message.
func waitStalledNotOwned(t *testing.T, obj interface {
	client.Object
	conditions.Setter
}) string {
	t.Helper()
	var msg string
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		if conditions.GetReason(obj, status.StalledCondition) != ReasonConflict {
			return fmt.Errorf("not stalled for a taken name: %v", conditions.GetMessage(obj, status.ReadyCondition))
		}
		msg = conditions.GetMessage(obj, status.StalledCondition)
		return nil
	})
	return msg
}

// TestSREAgentCannotBorrowAServiceAccount: an SREAgent whose child name is
// a ServiceAccount bound to cluster-admin stalls, and neither the
// ServiceAccount nor anything else changes; once the name is free it runs
// under a ServiceAccount of its own.
func TestSREAgentCannotBorrowAServiceAccount(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: builder.AgentChildPrefix + "admin-bot"}}
	if err := k8s.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "admin-bot-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
	}
	if err := k8s.Create(ctx, crb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), crb) })
	rv := sa.ResourceVersion

	a := &aiopsv1alpha1.SREAgent{}
	loadCase(t, seed("gpu-monitor-agent"), a)
	a.Namespace, a.Name, a.Spec.Image = ns, "admin-bot", "evil.example/shell:latest"
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	msg := waitStalledNotOwned(t, a)
	if !strings.Contains(msg, "ServiceAccount "+ns+"/sreagent-admin-bot exists and is not controlled by trainops") {
		t.Errorf("stalled message %q does not name the ServiceAccount", msg)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(sa), sa); err != nil {
		t.Fatal(err)
	}
	if sa.ResourceVersion != rv || len(sa.OwnerReferences) != 0 || len(sa.Labels) != 0 {
		t.Errorf("the taken ServiceAccount changed: rv %s→%s, owners %v, labels %v", rv, sa.ResourceVersion, sa.OwnerReferences, sa.Labels)
	}
	for _, o := range []client.Object{&appsv1.Deployment{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: sa.Name}, o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s exists (err %v): nothing of a stalled SREAgent is applied", o, sa.Name, err)
		}
	}

	// The name freed: the agent gets its own ServiceAccount.
	if err := k8s.Delete(ctx, sa); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), a); err != nil {
			return err
		}
		if !conditions.IsReady(a) {
			return fmt.Errorf("not ready: %s", conditions.GetMessage(a, status.ReadyCondition))
		}
		return nil
	})
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(sa), sa); err != nil || metav1.GetControllerOf(sa) == nil || metav1.GetControllerOf(sa).UID != a.UID {
		t.Fatalf("the agent's own ServiceAccount: %v %v", err, sa.OwnerReferences)
	}
}

// TestSREAgentChildrenUnderTheOldNameGo: children made under the agent's
// own name (before the prefix) are deleted once the prefixed ones exist.
func TestSREAgentChildrenUnderTheOldNameGo(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	a := createAgent(t, ns, "renamed", false)
	old := builder.ForSREAgent(a, builder.Options{AgentImage: testCfg.AgentImage}).ServiceAccount.DeepCopy()
	old.Name, old.ResourceVersion = a.Name, ""
	if err := k8s.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	unrelated := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bystander", Labels: map[string]string{builder.LabelSREAgent: a.Name}}}
	if err := k8s.Create(ctx, unrelated); err != nil {
		t.Fatal(err)
	}
	// Any change reconciles the agent.
	testenv.Update(t, k8s, a, func(a *aiopsv1alpha1.SREAgent) { a.Spec.MonitorInterval++ })
	testenv.Eventually(t, 30*time.Second, func() error {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(old), &corev1.ServiceAccount{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("old ServiceAccount still there (err %v)", err)
		}
		return nil
	})
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(unrelated), unrelated); err != nil {
		t.Errorf("a ServiceAccount the agent does not control was deleted: %v", err)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.AgentChildName(a)}, &corev1.ServiceAccount{}); err != nil {
		t.Errorf("the agent's ServiceAccount: %v", err)
	}
}

// TestPyJobNeverChangesAJobItDidNotCreate: a Job of the PyJob's Job name
// that trainops did not create stalls the PyJob and is left as it was.
func TestPyJobNeverChangesAJobItDidNotCreate(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	pj := &trainingv1alpha1.PyJob{}
	loadCase(t, seed("bert-training"), pj)
	pj.Namespace = ns
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: builder.JobName(pj)},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "c", Image: "someone/else"}},
		}}},
	}
	if err := k8s.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	msg := waitStalledNotOwned(t, pj)
	if !strings.Contains(msg, "Job "+ns+"/"+job.Name+" exists") {
		t.Errorf("stalled message %q does not name the Job", msg)
	}
	// The Job controller writes the Job's status; trainops writes nothing.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil || job.Generation != 1 || len(job.OwnerReferences) != 0 || job.Labels[builder.LabelManagedBy] != "" || job.Labels[builder.LabelPyJob] != "" || job.Spec.Template.Spec.Containers[0].Image != "someone/else" {
		t.Errorf("the Job changed: %v generation %d owners %v labels %v", err, job.Generation, job.OwnerReferences, job.Labels)
	}
	for _, m := range job.ManagedFields {
		if m.Manager == builder.FieldManager {
			t.Errorf("trainops wrote the Job: %+v", m)
		}
	}
}

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
	loadCase(t, seed("gpu-cluster-config"), cp)
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
