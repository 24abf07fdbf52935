// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/check"
)

// ImpersonatorClusterRole grants impersonation of ServiceAccounts. It is
// installed with trainops (config/rbac/gitsync_impersonator_role.yaml), and
// trainops holds it nowhere by itself: it binds it, through `bind` on this
// one name, in the namespace of each GitSync that names a ServiceAccount.
const ImpersonatorClusterRole = "trainops-gitsync-impersonator"

// impersonationBinding names the RoleBinding that lets trainops act as the
// ServiceAccounts of GitSync name's namespace.
func impersonationBinding(name string) string { return "trainops-gitsync-" + name }

// checkServiceAccountNamespace refuses a GitSync that names a ServiceAccount
// in a protected namespace (the cluster's own, or one the settings add):
// trainops impersonates nobody there, so a GitSync there cannot borrow, say,
// a kube-system controller's ServiceAccount. trainops's own namespace is the
// platform's, and may.
func (s GitSyncSettings) checkServiceAccountNamespace(gs *gitopsv1alpha1.GitSync) error {
	if gs.Spec.ServiceAccountName == "" || gs.Namespace == s.Home {
		return nil
	}
	if slices.Contains(check.ProtectedNamespaces(s.ProtectedNamespaces, ""), gs.Namespace) {
		return fmt.Errorf("spec.serviceAccountName: namespace %s is protected, and trainops acts as no ServiceAccount there: sync it from another namespace", gs.Namespace)
	}
	return nil
}

// bindImpersonation lets trainops (Settings.Identity) act as the
// ServiceAccounts of gs's namespace, and no other namespace's: a
// RoleBinding of ImpersonatorClusterRole there, controlled by gs, so it
// goes with gs. The API server is asked first (a SelfSubjectAccessReview,
// which writes nothing): a sync that already may act as the ServiceAccount
// binds nothing. Without a known identity (trainops run by a user whose
// own RBAC decides), nothing is bound.
func (r *GitSyncReconciler) bindImpersonation(ctx context.Context, gs *gitopsv1alpha1.GitSync) error {
	id := r.Settings.Identity
	if gs.Spec.ServiceAccountName == "" || id == nil {
		return nil
	}
	if ok, err := r.mayImpersonate(ctx, gs); ok || err != nil {
		return err
	}
	rb := &rbacv1.RoleBinding{
		TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Namespace: gs.Namespace, Name: impersonationBinding(gs.Name),
			Labels:          map[string]string{builder.LabelManagedBy: builder.ManagedBy},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(gs, gitopsv1alpha1.GroupVersion.WithKind("GitSync"))}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ImpersonatorClusterRole},
		Subjects: []rbacv1.Subject{*id},
	}
	if err := r.Live.Patch(ctx, rb, client.Apply, client.FieldOwner(builder.FieldManager), client.ForceOwnership); err != nil {
		return retryable{fmt.Errorf("let trainops act as the ServiceAccounts of namespace %s (RoleBinding %s of ClusterRole %s, installed with trainops): %w",
			gs.Namespace, rb.Name, ImpersonatorClusterRole, err)}
	}
	// A binding just made takes a moment to reach the API server's
	// authorizer: until it has, the sync waits (requeued), rather than
	// being refused for a Forbidden of its own making.
	if ok, err := r.mayImpersonate(ctx, gs); !ok || err != nil {
		return cmp.Or(err, error(retryable{fmt.Errorf("trainops may not act as ServiceAccount %s/%s yet (RoleBinding %s): retrying", gs.Namespace, gs.Spec.ServiceAccountName, rb.Name)}))
	}
	return nil
}

// mayImpersonate asks the API server whether trainops may act as gs's
// ServiceAccount now.
func (r *GitSyncReconciler) mayImpersonate(ctx context.Context, gs *gitopsv1alpha1.GitSync) (bool, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
		Namespace: gs.Namespace, Verb: "impersonate", Resource: "serviceaccounts", Name: gs.Spec.ServiceAccountName}}}
	if err := r.Live.Create(ctx, review); err != nil {
		return false, retryable{fmt.Errorf("check that trainops may act as ServiceAccount %s/%s: %w", gs.Namespace, gs.Spec.ServiceAccountName, err)}
	}
	return review.Status.Allowed, nil
}

// retryable is an error of a GitSync's spec check that says nothing of the
// spec: the sync is tried again, not stalled.
type retryable struct{ error }

func (e retryable) Unwrap() error { return e.error }

// SubjectOf is the RBAC subject of an authenticated user name: a
// ServiceAccount for "system:serviceaccount:<namespace>:<name>", else a
// User.
func SubjectOf(user string) rbacv1.Subject {
	if rest, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok {
		if ns, name, ok := strings.Cut(rest, ":"); ok {
			return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
		}
	}
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}
}
