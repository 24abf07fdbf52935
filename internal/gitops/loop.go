// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/decrypt"
)

// Fetcher gets the current revision of the repository.
type Fetcher interface {
	Fetch(ctx context.Context) (*gitsource.Checkout, error)
}

// Loop syncs on an interval and whenever asked. It runs only on the
// elected leader.
type Loop struct {
	Source     Fetcher
	Engine     *Engine
	Interval   time.Duration
	RetryDelay time.Duration
	Recorder   events.EventRecorder
	Log        logr.Logger
	// Observe, when set, is told the outcome of each sync: the revision
	// ("" when the fetch failed), the result and the error.
	Observe func(ctx context.Context, revision string, res Result, err error)
	// Applying, when set, is told each revision fetched, before it is
	// applied.
	Applying func(ctx context.Context, revision string)
	// Keys, when set, reads the keys that decrypt each revision, before
	// it is synced: a revision is not synced without them.
	Keys func(ctx context.Context) (*decrypt.Keys, error)

	trigger   chan struct{}
	lastError string
}

// NewLoop makes a loop; call Request to sync at once.
func NewLoop(src Fetcher, e *Engine, interval, retryDelay time.Duration, rec events.EventRecorder, log logr.Logger) *Loop {
	return &Loop{Source: src, Engine: e, Interval: interval, RetryDelay: retryDelay, Recorder: rec, Log: log, trigger: make(chan struct{}, 1)}
}

// Request asks for a sync as soon as possible; requests made while one is
// pending become one sync.
func (l *Loop) Request() {
	select {
	case l.trigger <- struct{}{}:
	default:
	}
}

// NeedLeaderElection: only the leader writes.
func (l *Loop) NeedLeaderElection() bool { return true }

// Start runs the loop until ctx ends.
func (l *Loop) Start(ctx context.Context) error {
	l.Log.Info("Reconcile loop started", "interval", l.Interval.String())
	if c, ok := l.Source.(io.Closer); ok {
		// Free the extracted files (kept in memory) when the loop ends.
		defer c.Close()
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-l.trigger:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		next := l.Interval
		if err := l.SyncOnce(ctx); err != nil && l.RetryDelay < next {
			next = l.RetryDelay
		}
		timer.Reset(next)
	}
}

// SyncOnce fetches and syncs the current revision.
func (l *Loop) SyncOnce(ctx context.Context) error {
	start := time.Now()
	co, err := l.Source.Fetch(ctx)
	fetched := time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		reason := ReasonOf(err)
		res := Result{Duration: time.Since(start)}
		observe(res, &SyncError{Reason: reason})
		if rerr := l.Engine.RecordFailure(ctx, err); rerr != nil {
			l.Log.Error(rerr, "record the failed fetch in the inventory")
		}
		l.report(ctx, "", fmt.Errorf("fetch: %w", err), res)
		l.observe(ctx, "", res, fmt.Errorf("fetch: %w", err))
		return err
	}
	if l.Applying != nil {
		l.Applying(ctx, co.Revision)
	}
	if l.Keys != nil {
		keys, kerr := l.Keys(ctx)
		if kerr != nil {
			res := Result{Revision: co.Revision, Duration: time.Since(start)}
			kerr = &SyncError{Reason: ReasonDecryptionFailed, Revision: co.Revision, Problems: []Problem{{Message: kerr.Error()}}}
			if rerr := l.Engine.RecordFailure(ctx, kerr); rerr != nil {
				l.Log.Error(rerr, "record the failed sync in the inventory")
			}
			l.report(ctx, co.Revision, kerr, res)
			l.observe(ctx, co.Revision, res, kerr)
			return kerr
		}
		l.Engine.Keys = keys
	}
	res, err := l.Engine.Sync(ctx, co.Dir, co.Revision)
	res.Duration = time.Since(start)
	if res.Phases == nil {
		res.Phases = map[string]time.Duration{}
	}
	res.Phases["fetch"] = fetched
	observe(res, err)
	l.report(ctx, co.Revision, err, res)
	l.observe(ctx, co.Revision, res, err)
	return err
}

func (l *Loop) observe(ctx context.Context, revision string, res Result, err error) {
	if l.Observe != nil {
		l.Observe(ctx, revision, res, err)
	}
}

// report logs the sync and records an Event on the inventory when
// something happened or the error changed; a quiet re-sync stays quiet.
func (l *Loop) report(ctx context.Context, revision string, err error, res Result) {
	inv := &corev1.ConfigMap{}
	haveInv := l.Engine.Client.Get(ctx, l.Engine.inventory().key(), inv) == nil
	if err != nil {
		l.Log.Error(err, "Reconcile failed", "revision", revision, "reason", ReasonOf(err), "duration", res.Duration.String())
		if msg := err.Error(); msg != l.lastError && haveInv && l.Recorder != nil {
			l.Recorder.Eventf(inv, nil, corev1.EventTypeWarning, "SyncFailed", "Sync", "%s", truncate(msg, 1000))
		}
		l.lastError = err.Error()
		return
	}
	l.Log.Info("Reconcile finished", "revision", revision, "applied", len(res.Applied), "unchanged", res.Unchanged, "reused", res.Reused, "pruned", len(res.Pruned), "duration", res.Duration.String(), "phases", res.PhaseSummary())
	if (len(res.Applied) > 0 || len(res.Pruned) > 0 || l.lastError != "") && haveInv && l.Recorder != nil {
		l.Recorder.Eventf(inv, nil, corev1.EventTypeNormal, "Synced", "Sync", "applied %d, pruned %d objects at %s", len(res.Applied), len(res.Pruned), revision)
	}
	l.lastError = ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// SetupTrigger makes a change of the inventory's sync-requested annotation
// (set by the webhook on any replica) trigger a sync on the leader.
func (l *Loop) SetupTrigger(mgr ctrl.Manager) error {
	key := l.Engine.inventory().key()
	isInventory := func(o client.Object) bool { return o.GetNamespace() == key.Namespace && o.GetName() == key.Name }
	pred := predicate.Funcs{
		// A leader's cache first lists the inventory: a request stamped
		// after the last sync began (on another replica, while this one
		// was taking over) is still to be served.
		CreateFunc:  func(e event.CreateEvent) bool { return isInventory(e.Object) && requestedSinceAttempt(e.Object) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return isInventory(e.ObjectNew) && e.ObjectNew.GetAnnotations()[AnnotationSyncRequested] != e.ObjectOld.GetAnnotations()[AnnotationSyncRequested]
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("sync-trigger").
		For(&corev1.ConfigMap{}, builder.WithPredicates(pred)).
		Complete(reconcileFunc(func(context.Context, ctrl.Request) (ctrl.Result, error) {
			l.Request()
			return ctrl.Result{}, nil
		}))
}

// requestedSinceAttempt reports whether the inventory's sync request is
// later than its last sync attempt (or there was none).
func requestedSinceAttempt(o client.Object) bool {
	req, err := time.Parse(time.RFC3339Nano, o.GetAnnotations()[AnnotationSyncRequested])
	if err != nil {
		return false
	}
	cm, ok := o.(*corev1.ConfigMap)
	if !ok {
		return false
	}
	attempted, err := time.Parse(time.RFC3339, cm.Data[keyAttemptedAt])
	return err != nil || req.After(attempted)
}

type reconcileFunc func(context.Context, ctrl.Request) (ctrl.Result, error)

func (f reconcileFunc) Reconcile(ctx context.Context, r ctrl.Request) (ctrl.Result, error) {
	return f(ctx, r)
}
