// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fluxcd/pkg/runtime/conditions"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/status"
)

// maxContested bounds status.contested.
const maxContested = 50

// gitSyncOfLabel is the GitSync whose sync label is label, when label has
// the readable form GitSyncLabel gives (gs.<namespace>.<name>).
func gitSyncOfLabel(label string) (types.NamespacedName, bool) {
	rest, ok := strings.CutPrefix(label, "gs.")
	if !ok {
		return types.NamespacedName{}, false
	}
	// A namespace has no dots; a name may.
	ns, name, ok := strings.Cut(rest, ".")
	if !ok || GitSyncLabel(ns, name) != label {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// ownerName names the sync whose sync label is label, for messages.
func ownerName(label string) string {
	if key, ok := gitSyncOfLabel(label); ok {
		return "GitSync " + key.String()
	}
	if strings.HasPrefix(label, "gs-") {
		return "the GitSync whose sync label is " + label
	}
	return "the trainops of namespace " + label
}

// gitSyncOf is the GitSync whose sync label is label, if one is: read
// from the label, or for a long name's hashed label, found among every
// GitSync (any shard's).
func (r *GitSyncReconciler) gitSyncOf(ctx context.Context, label string) (types.NamespacedName, bool) {
	if key, ok := gitSyncOfLabel(label); ok {
		return key, true
	}
	if !strings.HasPrefix(label, "gs-") {
		return types.NamespacedName{}, false
	}
	list := &gitopsv1alpha1.GitSyncList{}
	if err := r.Live.List(ctx, list); err != nil {
		return types.NamespacedName{}, false
	}
	for _, gs := range list.Items {
		if GitSyncLabel(gs.Namespace, gs.Name) == label {
			return client.ObjectKeyFromObject(&gs), true
		}
	}
	return types.NamespacedName{}, false
}

// contest reports, in the status of each GitSync whose object gs's
// refused revision holds, which objects gs claims; and withdraws what gs
// reported before and no longer claims. problems are gs's last refusal's
// (none after a sync that was not refused for a takeover).
func (r *GitSyncReconciler) contest(ctx context.Context, gs *gitopsv1alpha1.GitSync, problems []gitops.Problem) {
	self := client.ObjectKeyFromObject(gs)
	claims := map[types.NamespacedName][]string{}
	// Each owner's label is resolved once, however many objects it holds
	// (a hashed label costs a list of GitSyncs).
	owners := map[string]*types.NamespacedName{}
	for _, p := range problems {
		if p.Owner == "" {
			continue
		}
		owner, seen := owners[p.Owner]
		if !seen {
			if key, ok := r.gitSyncOf(ctx, p.Owner); ok && key != self {
				owner = &key
			}
			owners[p.Owner] = owner
		}
		if owner != nil {
			claims[*owner] = append(claims[*owner], p.Object)
		}
	}
	r.mu.Lock()
	before := r.claimed[self]
	if r.claimed == nil {
		r.claimed = map[types.NamespacedName][]types.NamespacedName{}
	}
	r.claimed[self] = nil
	for owner := range claims {
		r.claimed[self] = append(r.claimed[self], owner)
	}
	if len(r.claimed[self]) == 0 {
		delete(r.claimed, self)
	}
	r.mu.Unlock()
	for owner, objects := range claims {
		r.setContested(ctx, owner, self, objects)
	}
	for _, owner := range before {
		if _, still := claims[owner]; !still {
			r.setContested(ctx, owner, self, nil)
		}
	}
}

// setContested makes owner's status.contested list exactly objects as
// claimed by claimant, and records an Event on owner for a new claim.
// Best effort: owner checks its list on each of its own syncs.
func (r *GitSyncReconciler) setContested(ctx context.Context, owner, claimant types.NamespacedName, objects []string) {
	by := claimant.String()
	var added []string
	err := retry.RetryOnConflict(contestedBackoff, func() error {
		gs := &gitopsv1alpha1.GitSync{}
		if err := r.Live.Get(ctx, owner, gs); err != nil {
			return client.IgnoreNotFound(err)
		}
		var next []gitopsv1alpha1.ContestedObject
		had := map[string]bool{}
		for _, c := range gs.Status.Contested {
			if c.ClaimedBy == by {
				had[c.Object] = true
				continue
			}
			next = append(next, c)
		}
		added = nil
		for _, o := range objects {
			next = append(next, gitopsv1alpha1.ContestedObject{Object: o, ClaimedBy: by})
			if !had[o] {
				added = append(added, o)
			}
		}
		slices.SortFunc(next, func(a, b gitopsv1alpha1.ContestedObject) int {
			return strings.Compare(a.ClaimedBy+" "+a.Object, b.ClaimedBy+" "+b.Object)
		})
		next = next[:min(len(next), maxContested)]
		if slices.Equal(next, gs.Status.Contested) {
			return nil
		}
		patch := client.MergeFromWithOptions(gs.DeepCopy(), client.MergeFromWithOptimisticLock{})
		gs.Status.Contested = next
		err := r.Live.Status().Patch(ctx, gs, patch)
		if err == nil && len(added) > 0 {
			r.Recorder.Eventf(gs, nil, corev1.EventTypeWarning, "Contested", "Claim",
				"GitSync %s's repository also holds %s; its sync is refused until one of the two repositories lets go", by, strings.Join(added, ", "))
		}
		return err
	})
	if err != nil {
		// The claimant's next sync claims again.
		log.FromContext(ctx).Error(err, "record a claim in the owner's status.contested", "owner", owner, "claimant", claimant)
	}
}

// contestedBackoff paces the retries of a write of status.contested that
// met another: many GitSyncs may claim from one owner at once, each write
// reads the list again, and jitter spreads them out.
var contestedBackoff = wait.Backoff{Steps: 12, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 1}

// pruneContested drops from key's status.contested the claims no longer
// made: the claimant is gone, or its sync is no longer refused for the
// object. status.contested has writers besides key's own sync (each
// claimant's setContested), so the list is read live and written with an
// optimistic lock, read again on a conflict: no claim written meanwhile
// is lost.
func (r *GitSyncReconciler) pruneContested(ctx context.Context, key types.NamespacedName) error {
	return retry.RetryOnConflict(contestedBackoff, func() error {
		gs := &gitopsv1alpha1.GitSync{}
		if err := r.Live.Get(ctx, key, gs); err != nil {
			return client.IgnoreNotFound(err)
		}
		keep := r.stillContested(ctx, gs)
		if slices.Equal(keep, gs.Status.Contested) {
			return nil
		}
		patch := client.MergeFromWithOptions(gs.DeepCopy(), client.MergeFromWithOptimisticLock{})
		gs.Status.Contested = keep
		return client.IgnoreNotFound(r.Live.Status().Patch(ctx, gs, patch))
	})
}

// stillContested is gs's status.contested without the claims no longer
// made: the claimant is gone, or its sync is no longer refused for the
// object. One read per claimant, only when there are claims.
func (r *GitSyncReconciler) stillContested(ctx context.Context, gs *gitopsv1alpha1.GitSync) []gitopsv1alpha1.ContestedObject {
	if len(gs.Status.Contested) == 0 {
		return nil
	}
	claimants := map[string]*gitopsv1alpha1.GitSync{}
	var keep []gitopsv1alpha1.ContestedObject
	for _, c := range gs.Status.Contested {
		other, seen := claimants[c.ClaimedBy]
		if !seen {
			ns, name, _ := strings.Cut(c.ClaimedBy, "/")
			other = &gitopsv1alpha1.GitSync{}
			if err := r.Live.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, other); err != nil {
				other = nil
			}
			claimants[c.ClaimedBy] = other
		}
		if other != nil && conditions.GetReason(other, status.StalledCondition) == gitops.ReasonTakeoverRefused &&
			slices.ContainsFunc(other.Status.LastError, func(p gitopsv1alpha1.SyncProblem) bool { return p.Object == c.Object }) {
			keep = append(keep, c)
		}
	}
	return keep
}
