// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/install"
	"github.com/trainops/trainops/internal/scheme"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

// asTrainops makes a ServiceAccount in home bound to trainops's ClusterRole
// as installed (under a name of the test's own), installs the impersonator
// ClusterRole, and returns the ServiceAccount's user and groups.
func asTrainops(t *testing.T, home string) (string, []string) {
	t.Helper()
	ctx := context.Background()
	role, err := install.ClusterRole("trainops-manager")
	if err != nil {
		t.Fatal(err)
	}
	role.ResourceVersion, role.Name = "", "trainops-manager-"+home
	imp, err := install.ClusterRole(ImpersonatorClusterRole)
	if err != nil {
		t.Fatal(err)
	}
	imp.ResourceVersion = ""
	if err := k8s.Create(ctx, imp); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "trainops"}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: home, Name: sa.Name}}}
	for _, o := range []client.Object{role, sa, binding} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
	return testenv.ServiceAccountUser(home, sa.Name)
}

// mayImpersonate asks the API server whether user may impersonate the
// ServiceAccount ns/name.
func mayImpersonate(t *testing.T, user string, groups []string, ns, name string) bool {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "impersonate", Resource: "serviceaccounts", Name: name}}}
	if err := k8s.Create(context.Background(), review); err != nil {
		t.Fatal(err)
	}
	return review.Status.Allowed
}

// TestTrainopsImpersonatesOnlyWhereAGitSyncNamesIt runs the GitSync
// reconciler as a ServiceAccount bound to trainops's ClusterRole as
// installed. It may impersonate no ServiceAccount anywhere until a GitSync
// names one: then it may in that GitSync's namespace (the GitSync syncs as
// its ServiceAccount), in no other, and never in kube-system, where a
// GitSync naming a ServiceAccount is refused and nothing is bound.
func TestTrainopsImpersonatesOnlyWhereAGitSyncNamesIt(t *testing.T) {
	home, team, bare := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	user, groups := asTrainops(t, home)
	sa := teamServiceAccount(t, team)
	for _, target := range [][2]string{{team, sa}, {bare, "default"}, {"kube-system", "clusterrole-aggregation-controller"}} {
		if mayImpersonate(t, user, groups, target[0], target[1]) {
			t.Fatalf("before any GitSync, trainops may impersonate %s/%s", target[0], target[1])
		}
	}
	cfg := env.Impersonate(user, groups...)
	live, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	id := SubjectOf(user)
	git, _ := startGitSyncReconcilerAs(t, cfg, live, home, func(s *GitSyncSettings) { s.Identity = &id })
	teamRepo(t, git, "team.git", team+"/p1")
	gs := newGitSync(t, git, team, "training", "team.git", sa)
	waitGitSync(t, gs, "ready", ready(""))
	if !pyjobExists(t, team, "p1") {
		t.Fatal("the GitSync's PyJob was not applied as its ServiceAccount")
	}
	if !mayImpersonate(t, user, groups, team, sa) {
		t.Error("trainops may not impersonate the ServiceAccount its GitSync names")
	}
	for _, target := range [][2]string{{bare, "default"}, {"kube-system", "clusterrole-aggregation-controller"}} {
		if mayImpersonate(t, user, groups, target[0], target[1]) {
			t.Errorf("trainops may impersonate %s/%s, in a namespace with no GitSync", target[0], target[1])
		}
	}
	rb := &rbacv1.RoleBinding{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: team, Name: impersonationBinding(gs.Name)}, rb); err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(rb); ref == nil || ref.UID != waitGitSync(t, gs, "ready", ready("")).UID {
		t.Errorf("the impersonation binding is not controlled by its GitSync: %v", rb.OwnerReferences)
	}

	// A GitSync in kube-system naming a ServiceAccount there.
	if err := k8s.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "gitsync-" + home}}); err != nil {
		t.Fatal(err)
	}
	sys := newGitSync(t, git, "kube-system", "borrow-"+home, "team.git", "gitsync-"+home)
	g := waitGitSync(t, sys, "refused", func(g *gitopsv1alpha1.GitSync) bool {
		return conditions.GetReason(g, status.StalledCondition) == ReasonInvalidSpec
	})
	if msg := conditions.GetMessage(g, status.StalledCondition); !strings.Contains(msg, "namespace kube-system is protected") {
		t.Errorf("stalled for %q, want the protected namespace named", msg)
	}
	err = k8s.Get(context.Background(), client.ObjectKey{Namespace: "kube-system", Name: impersonationBinding(sys.Name)}, &rbacv1.RoleBinding{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a binding was made in kube-system: %v", err)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if mayImpersonate(t, user, groups, "kube-system", "gitsync-"+home) {
			return fmt.Errorf("trainops may impersonate in kube-system")
		}
		return nil
	})
}
