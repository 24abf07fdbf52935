// SPDX-License-Identifier: Apache-2.0

package sreagent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/ctrltest"
)

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
	testenv.LoadCase(t, testenv.Seed("gpu-monitor-agent"), a)
	a.Namespace, a.Name, a.Spec.Image = ns, "admin-bot", "evil.example/shell:latest"
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	msg := ctrltest.WaitStalledNotOwned(t, k8s, a)
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
