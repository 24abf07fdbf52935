// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// fairRetry is about when a GitSync held back for its namespace's share
// is looked at again (jittered, so a namespace's waiting GitSyncs do not
// come back together).
const fairRetry = time.Second

// errDeleted ends the sync of a GitSync that is being deleted.
var errDeleted = errors.New("the GitSync is being deleted")

// fairShare keeps one namespace from holding more than its share of the
// GitSync workers, and lets a GitSync's deletion end its sync in progress.
// A GitSync past its namespace's share is requeued, never parked in a
// worker; the share is counted by the syncs running, so a namespace whose
// GitSyncs hang on an unanswering server holds its share and no more.
type fairShare struct {
	mu       sync.Mutex
	running  map[string]int
	inflight map[types.NamespacedName]context.CancelCauseFunc
}

// enter starts the sync of key if its namespace is under limit syncs
// running. ctx is then ended when the GitSync is deleted (cancel); leave
// must be called when the sync ends.
func (f *fairShare) enter(ctx context.Context, key types.NamespacedName, limit int) (_ context.Context, leave func(), ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running[key.Namespace] >= limit {
		return ctx, nil, false
	}
	if f.running == nil {
		f.running = map[string]int{}
		f.inflight = map[types.NamespacedName]context.CancelCauseFunc{}
	}
	f.running[key.Namespace]++
	ctx, cancel := context.WithCancelCause(ctx)
	f.inflight[key] = cancel
	return ctx, func() {
		cancel(nil)
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.inflight, key)
		if f.running[key.Namespace]--; f.running[key.Namespace] <= 0 {
			delete(f.running, key.Namespace)
		}
	}, true
}

// cancel ends the sync of key in progress, if any.
func (f *fairShare) cancel(key types.NamespacedName) {
	f.mu.Lock()
	cancel := f.inflight[key]
	f.mu.Unlock()
	if cancel != nil {
		cancel(errDeleted)
	}
}

// cancelOnDelete is a predicate that passes every event and, seeing a
// GitSync marked for deletion, ends its sync in progress at once: the
// informer sees the deletion while the GitSync's worker is still busy,
// and the finalizer runs as soon as that worker returns.
func (f *fairShare) cancelOnDelete() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool {
		if o.GetDeletionTimestamp() != nil {
			f.cancel(client.ObjectKeyFromObject(o))
		}
		return true
	})
}

// retryLater is when a GitSync held back for its namespace's share is
// looked at again.
func retryLater() time.Duration {
	return fairRetry/2 + rand.N(fairRetry)
}

// perNamespace is how many GitSyncs of one namespace sync at once: the
// setting, else half the workers, at least one.
func (s GitSyncSettings) perNamespace() int {
	if s.MaxConcurrentPerNamespace > 0 {
		return s.MaxConcurrentPerNamespace
	}
	return max(1, max(s.MaxConcurrent, 1)/2)
}

// timeout is the bound on one sync of a GitSync, fetch included: its
// spec.timeout (or the default), never past the settings' MaxTimeout.
func (s GitSyncSettings) timeout(d *metav1.Duration) time.Duration {
	t := durationOr(d, defaultGitSyncTimeout)
	if s.MaxTimeout > 0 {
		t = min(t, s.MaxTimeout)
	}
	return t
}
