// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/gitops"
)

// Push asks for a sync of every GitSync that follows the pushed repository
// and ref, and reports how many. Those this process serves, when it leads,
// it enqueues at once, after telling the pool, so their next fetch asks
// the Git server again, once for all of them. The others (on a follower,
// or another shard's) it asks through their requested-at annotation,
// stamped with the push's time, which their leader watches: one webhook
// serves every shard. A push that names no repository asks for none.
func (r *GitSyncReconciler) Push(ctx context.Context, push gitops.Push, leader bool) (int, error) {
	if len(push.Repos) == 0 {
		return 0, nil
	}
	// Every shard's GitSyncs, so uncached: the cache holds this shard's.
	list := &gitopsv1alpha1.GitSyncList{}
	if err := r.Live.List(ctx, list); err != nil {
		return 0, fmt.Errorf("list GitSyncs: %w", err)
	}
	var hit []*gitopsv1alpha1.GitSync
	for i := range list.Items {
		gs := &list.Items[i]
		// The settings' GitSync is asked through the settings' sync; one
		// with a webhook secret of its own, only through its own path.
		if gs.Spec.WebhookSecretRef == nil && follows(gs, push) {
			hit = append(hit, gs)
		}
	}
	return len(hit), r.ask(ctx, push, leader, hit)
}

// follows reports whether a push asks for a sync of gs.
func follows(gs *gitopsv1alpha1.GitSync, push gitops.Push) bool {
	repo := gs.Spec.Repository
	return !gs.Spec.Suspend && gs.DeletionTimestamp.IsZero() && gs.Annotations[AnnotationFromSettings] != "true" &&
		push.Follows(repo.URL, gitsource.Ref{Branch: repo.Branch, Tag: repo.Tag, Commit: repo.Commit}, false)
}

// PushGitSync asks for a sync of the GitSync namespace/name alone, if it
// follows the push: a push checked against that GitSync's own webhook
// secret.
func (r *GitSyncReconciler) PushGitSync(ctx context.Context, namespace, name string, push gitops.Push, leader bool) error {
	gs := &gitopsv1alpha1.GitSync{}
	if err := r.Live.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, gs); err != nil {
		return fmt.Errorf("GitSync %s/%s: %w", namespace, name, err)
	}
	if !follows(gs, push) {
		return nil
	}
	return r.ask(ctx, push, leader, []*gitopsv1alpha1.GitSync{gs})
}

// ask asks for a sync of each of hit: those this process serves, when it
// leads, at once (after telling the pool, so their next fetch asks the
// Git server again); the others through their requested-at annotation.
func (r *GitSyncReconciler) ask(ctx context.Context, push gitops.Push, leader bool, hit []*gitopsv1alpha1.GitSync) error {
	if len(hit) == 0 {
		return nil
	}
	if leader {
		for _, key := range push.Repos {
			r.Pool.Announce(key, push.Ref)
		}
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, gs := range hit {
		if leader && r.serves(ctx, gs) {
			select {
			case r.wake.channel() <- event.GenericEvent{Object: gs}:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		patch := client.MergeFrom(gs.DeepCopy())
		if gs.Annotations == nil {
			gs.Annotations = map[string]string{}
		}
		gs.Annotations[AnnotationRequestedAt] = now
		if err := r.Live.Patch(ctx, gs, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("ask for a sync of GitSync %s/%s: %w", gs.Namespace, gs.Name, err)
		}
	}
	return nil
}

// WebhookSecret is the token of the GitSync namespace/name's
// spec.webhookSecretRef, read as the GitSync's identity: its
// ServiceAccount, or trainops in trainops's own namespace.
func (r *GitSyncReconciler) WebhookSecret(ctx context.Context, namespace, name string) ([]byte, error) {
	gs := &gitopsv1alpha1.GitSync{}
	if err := r.Live.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, gs); err != nil {
		return nil, err
	}
	ref := gs.Spec.WebhookSecretRef
	if ref == nil {
		return nil, fmt.Errorf("GitSync %s/%s has no webhook secret of its own", namespace, name)
	}
	sec, err := r.secretOf(ctx, gs, nil, "spec.webhookSecretRef", ref.Name)
	if err != nil {
		return nil, err
	}
	return sec.Data["token"], nil
}

// serves reports whether this process syncs gs: its shard selects gs's
// namespace.
func (r *GitSyncReconciler) serves(ctx context.Context, gs *gitopsv1alpha1.GitSync) bool {
	return r.servesNamespace(ctx, gs.Namespace)
}

// servesNamespace reports whether this process syncs the GitSyncs of
// namespace ns: its shard selector matches the namespace's labels, which
// the platform sets and a team (admin of its namespace, not of the
// Namespace object) cannot. The GitSync's own labels, which its team
// writes, play no part. A namespace that cannot be read is nobody's.
func (r *GitSyncReconciler) servesNamespace(ctx context.Context, ns string) bool {
	if r.Settings.Selector == nil {
		return true
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := r.Get(ctx, client.ObjectKey{Name: ns}, m); err != nil {
		return false
	}
	return r.Settings.Selector.Matches(labels.Set(m.Labels))
}

// wakeups enqueue the GitSyncs a push names, on the GitSync reconciler's
// own queue.
type wakeups struct {
	once sync.Once
	ch   chan event.GenericEvent
}

func (w *wakeups) channel() chan event.GenericEvent {
	w.once.Do(func() { w.ch = make(chan event.GenericEvent, 1024) })
	return w.ch
}

// source is the event source to watch: it enqueues each woken object.
func (w *wakeups) source() source.Source {
	return source.Channel(w.channel(), &handler.EnqueueRequestForObject{})
}
