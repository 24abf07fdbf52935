// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/crdschema"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/notify"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/workload"
	"github.com/trainops/trainops/render"
)

// GitSyncFinalizer holds a GitSync back from deletion until what it
// applied is pruned (unless spec.prune is false).
const GitSyncFinalizer = "gitops.trainops.dev/prune"

// AnnotationRequestedAt on a GitSync asks for a sync now; its value is
// echoed in status.lastHandledReconcileAt once a sync answered it.
const AnnotationRequestedAt = "reconcile.trainops.dev/requestedAt"

// Reasons of a GitSync's conditions besides the sync engine's own
// (gitops.Reason*).
const (
	ReasonFetchFailed = "FetchFailed"
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonImpersonationPending: trainops may not act as the GitSync's
	// ServiceAccount yet (its RoleBinding being made).
	ReasonImpersonationPending = "ImpersonationPending"
)

// The CRD's defaults of spec.timeout and spec.interval.
const (
	defaultGitSyncTimeout  = 5 * time.Minute
	defaultGitSyncInterval = 10 * time.Minute
)

// durationOr is d, or def when d is unset.
func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil || d.Duration <= 0 {
		return def
	}
	return d.Duration
}

// GitSyncSettings are trainops's own settings every GitSync works within.
type GitSyncSettings struct {
	// Home is trainops's namespace: a GitSync there acts as trainops, and
	// the namespace is never written by any sync.
	Home string
	// CacheDir holds the clones, one folder per GitSync.
	CacheDir string
	// AllowedKinds are the kinds a GitSync that names none may apply.
	AllowedKinds []schema.GroupKind
	// ProtectedNamespaces are never written by any GitSync.
	ProtectedNamespaces []string
	// Workload bounds what PyJobs and ClusterPolicies may ask for.
	Workload workload.Policy
	// Concurrency is the parallel API requests of one sync.
	Concurrency int
	// Render bounds each render.
	Render render.Limits
	// DecryptKinds are the kinds whose SOPS-encrypted objects are
	// decrypted (nil: check.DefaultDecryptKinds).
	DecryptKinds []schema.GroupKind
	// RequireServiceAccount refuses a GitSync outside Home that names no
	// serviceAccountName.
	RequireServiceAccount bool
	// MaxConcurrent is how many GitSyncs sync at once.
	MaxConcurrent int
	// MaxConcurrentPerNamespace is how many GitSyncs of one namespace sync
	// at once (0: half of MaxConcurrent, at least one): a namespace whose
	// syncs hang leaves the other workers to the other namespaces.
	MaxConcurrentPerNamespace int
	// MaxTimeout bounds every GitSync's spec.timeout (0: no bound), so no
	// team holds a worker longer than the platform allows.
	MaxTimeout time.Duration
	// Identity is trainops's own user, which a GitSync naming a
	// ServiceAccount lets impersonate that namespace's ServiceAccounts
	// (bindImpersonation); nil binds nothing.
	Identity *rbacv1.Subject
	// Selector picks, by their labels, the namespaces whose GitSyncs this
	// process syncs (--shard); nil for all.
	Selector labels.Selector
}

// GitSyncReconciler keeps the cluster in step with each GitSync's
// repository.
type GitSyncReconciler struct {
	// Client reads GitSyncs (cached) and writes their status.
	client.Client
	// Live reads for the sync engines (not cached).
	Live       client.Client
	RestConfig *rest.Config
	HTTPClient *http.Client
	Mapper     meta.RESTMapper
	// Schemas validate objects of trainops's kinds offline (loaded on the
	// first sync).
	Schemas  func() (*crdschema.Schemas, error)
	Recorder events.EventRecorder
	Settings GitSyncSettings
	// Notifier posts the commit statuses of GitSyncs with
	// spec.commitStatus (nil: none are posted).
	Notifier *notify.Notifier

	// Pool shares one fetch among GitSyncs of the same repository, ref and
	// credentials.
	Pool *gitsource.Pool
	// Yield is told while a GitSync's sync writes, so that the
	// reconcilers give way (nil: they write beside it).
	Yield *gitops.Yield
	// SettingsSync is the GitSync of the settings' repository, which the
	// settings' own sync syncs: this reconciler only passes its
	// requested-at annotation on.
	SettingsSync *SettingsGitSync

	mu    sync.Mutex
	syncs map[types.NamespacedName]*gitSyncRunner
	// claimed holds, for each GitSync whose revision was refused for
	// another's objects, those GitSyncs, whose status says so.
	claimed map[types.NamespacedName][]types.NamespacedName
	// wake enqueues the GitSyncs a push names.
	wake wakeups
	// fair bounds each namespace's share of the workers, and ends the sync
	// of a GitSync being deleted.
	fair fairShare
}

// +kubebuilder:rbac:groups=gitops.trainops.dev,resources=gitsyncs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=gitops.trainops.dev,resources=gitsyncs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=gitops.trainops.dev,resources=gitsyncs/finalizers,verbs=update
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=get;bind,resourceNames=trainops-gitsync-impersonator

// SetupWithManager registers the reconciler: a GitSync is synced when its
// spec or the requested-at annotation changes, and every interval.
func (r *GitSyncReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&gitopsv1alpha1.GitSync{}, builder.WithPredicates(
			r.fair.cancelOnDelete(),
			predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}),
			// Another shard's GitSyncs are not this process's, whatever
			// the cache holds.
			predicate.NewPredicateFuncs(func(o client.Object) bool { return r.servesNamespace(context.Background(), o.GetNamespace()) }))).
		WatchesRawSource(r.wake.source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Settings.MaxConcurrent, 1), RateLimiter: status.ErrorBackoff[reconcile.Request]()}).
		Named("gitsync").
		Complete(r)
}

// Reconcile syncs one GitSync's repository, or prunes what it applied
// when it is being deleted.
func (r *GitSyncReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	gs := &gitopsv1alpha1.GitSync{}
	if err := r.Get(ctx, req.NamespacedName, gs); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !r.serves(ctx, gs) {
		return ctrl.Result{}, nil // another shard's
	}
	if s := r.SettingsSync; s != nil && req.NamespacedName == s.Key && gs.Annotations[AnnotationFromSettings] == "true" {
		s.requested(gs)
		return ctrl.Result{}, nil
	}
	if !gs.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, gs)
	}
	ctx, leave, ok := r.fair.enter(ctx, req.NamespacedName, r.Settings.perNamespace())
	if !ok {
		// The namespace holds its share of the workers: come back, rather
		// than take one more.
		return ctrl.Result{RequeueAfter: retryLater()}, nil
	}
	defer leave()
	if !controllerutil.ContainsFinalizer(gs, GitSyncFinalizer) {
		patch := client.MergeFrom(gs.DeepCopy())
		controllerutil.AddFinalizer(gs, GitSyncFinalizer)
		if err := r.Patch(ctx, gs, patch); err != nil {
			return ctrl.Result{}, err
		}
	}
	requested := gs.Annotations[AnnotationRequestedAt]
	var refused []gitops.Problem
	// status.contested is written apart, under a lock: other GitSyncs
	// write it too. The status write below leaves it as read. Pruning only
	// drops claims, so with none cached there is nothing to read live: a
	// claim made since is a live one.
	if len(gs.Status.Contested) > 0 {
		if err := r.pruneContested(ctx, req.NamespacedName); err != nil {
			return ctrl.Result{}, err
		}
	}
	return status.WithStatusCheckpoints(ctx, r.Client, gs, func(checkpoint func(context.Context) error) (ctrl.Result, error) {
		if gs.Spec.Suspend {
			conditions.Delete(gs, status.ReconcilingCondition)
			return ctrl.Result{}, nil
		}
		res, takeovers, err := r.sync(ctx, gs, checkpoint)
		var soon *gitsource.TooSoonError
		if errors.As(err, &soon) {
			// The repository was fetched moments ago: the request stays
			// unanswered until the fetch it asks for.
			return ctrl.Result{RequeueAfter: soon.Wait}, nil
		}
		gs.Status.LastHandledReconcileAt = requested
		refused = takeovers
		return res, err
	}, func() {
		// Once this GitSync's status says why it was refused, so does the
		// status of each GitSync whose objects it claims.
		r.contest(ctx, gs, refused)
	})
}

// sync fetches and applies the GitSync's repository and records the
// outcome in its status. A new revision is first said to be applying
// (MarkApplying), written at once with checkpoint: its new PyJobs wait
// meanwhile (Hold). takeovers are the problems of a revision refused for
// holding objects another sync applied.
func (r *GitSyncReconciler) sync(ctx context.Context, gs *gitopsv1alpha1.GitSync, checkpoint func(context.Context) error) (_ ctrl.Result, takeovers []gitops.Problem, _ error) {
	run, err := r.runner(ctx, gs)
	if re := (retryable{}); errors.As(err, &re) {
		status.MarkInProgress(gs, ReasonImpersonationPending, "%v", err)
		return ctrl.Result{}, nil, err
	}
	if err != nil {
		status.MarkStalled(gs, ReasonInvalidSpec, "%v", err)
		gs.Status.LastError = []gitopsv1alpha1.SyncProblem{{Message: err.Error()}}
		return ctrl.Result{}, nil, reconcile.TerminalError(err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.Settings.timeout(gs.Spec.Timeout))
	defer cancel()
	co, release, err := r.Pool.Fetch(ctx, client.ObjectKeyFromObject(gs).String(), *run.source, requestedSince(gs))
	var soon *gitsource.TooSoonError
	if errors.As(err, &soon) {
		return ctrl.Result{}, nil, err
	}
	if err != nil {
		RecordSync(gs, "", gitops.Result{}, fmt.Errorf("fetch: %w", err))
		return ctrl.Result{}, nil, err
	}
	if firstAttempt(gs, co.Revision) {
		MarkApplying(gs, co.Revision)
		if err := checkpoint(ctx); err != nil {
			// Nothing is held then: the sync goes on.
			run.engine.Log.V(1).Info("could not say the revision is applying", "revision", co.Revision, "error", err.Error())
		}
	}
	appliedBefore := gs.Status.LastAppliedRevision
	res, err := run.engine.Sync(ctx, co.Dir, co.Revision)
	release()
	r.postStatus(run, gs, co.Revision, appliedBefore, res, err)
	if err == nil {
		run.engine.Log.Info("synced", "revision", co.Revision, "applied", len(res.Applied), "unchanged", res.Unchanged, "reused", res.Reused, "pruned", len(res.Pruned),
			"duration", res.Duration.String(), "phases", res.PhaseSummary())
	}
	refused := RecordSync(gs, co.Revision, res, err)
	interval := ctrl.Result{RequeueAfter: durationOr(gs.Spec.Interval, defaultGitSyncInterval)}
	switch {
	case err == nil:
		return interval, nil, nil
	case refused != nil:
		r.Recorder.Eventf(gs, nil, corev1.EventTypeWarning, refused.Reason, "Sync", "%s", firstLine(err))
		if refused.Reason == gitops.ReasonTakeoverRefused {
			takeovers = refused.Problems
		}
		return interval, takeovers, nil
	}
	return ctrl.Result{}, nil, err
}

// RecordSync writes the outcome of a sync of revision ("" when the fetch
// failed) into gs's status: Ready; Stalled with the engine's reason for a
// revision refused as it is, until a new commit; or Reconciling for a
// failure on the way, to be retried. It returns the refusal, if that is
// what err is.
func RecordSync(gs *gitopsv1alpha1.GitSync, revision string, res gitops.Result, err error) (refused *gitops.SyncError) {
	if revision != "" {
		gs.Status.LastAttemptedRevision = revision
	}
	if res.Counts != nil {
		gs.Status.Inventory = countsByKind(res.Counts)
	}
	var se *gitops.SyncError
	switch {
	case err == nil:
		gs.Status.LastAppliedRevision = revision
		gs.Status.LastError = nil
		status.MarkDone(gs, true, status.ReasonSucceeded, "applied revision %s: %d applied, %d unchanged, %d pruned", revision, len(res.Applied), res.Unchanged, len(res.Pruned))
		return nil
	case errors.As(err, &se) && refusedRevision(se.Reason):
		// The revision itself is refused: nothing of it was applied, and
		// only a new commit can change that.
		gs.Status.LastError = problems(se.Problems, err)
		status.MarkStalled(gs, se.Reason, "%s", firstLine(err))
		return se
	case revision == "":
		status.MarkInProgress(gs, ReasonFetchFailed, "%s (retrying)", firstLine(err))
		gs.Status.LastError = problems(nil, err)
		return nil
	}
	gs.Status.LastError = problems(nil, err)
	if errors.As(err, &se) {
		gs.Status.LastError = problems(se.Problems, err)
	}
	status.MarkInProgress(gs, gitops.ReasonOf(err), "%s (retrying)", firstLine(err))
	return nil
}

// refusedRevision reports whether a sync error of reason refuses the
// revision as it is, rather than failing on the way.
func refusedRevision(reason string) bool {
	switch reason {
	case gitops.ReasonRenderFailed, gitops.ReasonEmptyRender, gitops.ReasonValidationFailed,
		gitops.ReasonTakeoverRefused, gitops.ReasonDryRunFailed, gitops.ReasonForbidden, gitops.ReasonPruneBudgetExceeded:
		return true
	}
	return false
}

// maxProblems bounds status.lastError.
const maxProblems = 20

// problems is the status's account of a refused sync.
func problems(ps []gitops.Problem, err error) []gitopsv1alpha1.SyncProblem {
	if len(ps) == 0 {
		return []gitopsv1alpha1.SyncProblem{{Message: err.Error()}}
	}
	out := make([]gitopsv1alpha1.SyncProblem, 0, min(len(ps), maxProblems))
	for _, p := range ps[:min(len(ps), maxProblems)] {
		out = append(out, gitopsv1alpha1.SyncProblem{File: p.File, Object: p.Object, Message: p.Message})
	}
	return out
}

// firstLine is the first line of err's message; for a sync refused for
// several problems, the first of them and how many more there are (the
// status's lastError lists them).
func firstLine(err error) string {
	var se *gitops.SyncError
	if errors.As(err, &se) && len(se.Problems) > 1 {
		return fmt.Sprintf("%s at %s: %s (and %d more problems)", se.Reason, se.Revision, se.Problems[0], len(se.Problems)-1)
	}
	first, _, _ := strings.Cut(err.Error(), "\n")
	return first
}

// finalize prunes what gs applied (unless spec.prune is false), then lets
// it go.
func (r *GitSyncReconciler) finalize(ctx context.Context, gs *gitopsv1alpha1.GitSync) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(gs, GitSyncFinalizer) {
		return ctrl.Result{}, nil
	}
	if gs.Spec.Prune && !r.namespaceGoing(ctx, gs.Namespace) && r.applied(ctx, gs) {
		eng, err := r.engine(gs)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("prune what GitSync %s/%s applied: %w (set spec.prune to false to delete it without pruning)", gs.Namespace, gs.Name, err)
		}
		res, err := eng.PruneAll(ctx)
		if err != nil {
			return ctrl.Result{}, err
		}
		if len(res.Pruned) > 0 {
			r.Recorder.Eventf(gs, nil, corev1.EventTypeNormal, "Pruned", "Delete", "pruned %d objects", len(res.Pruned))
		}
	}
	r.forget(ctx, client.ObjectKeyFromObject(gs))
	patch := client.MergeFrom(gs.DeepCopy())
	controllerutil.RemoveFinalizer(gs, GitSyncFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Patch(ctx, gs, patch))
}

// applied reports whether gs has an inventory, so something to prune: a
// GitSync that never applied anything (its spec refused from the start)
// goes without building an engine its spec does not allow.
func (r *GitSyncReconciler) applied(ctx context.Context, gs *gitopsv1alpha1.GitSync) bool {
	err := r.Live.Get(ctx, client.ObjectKey{Namespace: gs.Namespace, Name: gitSyncInventory(gs.Name)}, &corev1.ConfigMap{})
	return !apierrors.IsNotFound(err)
}

// namespaceGoing reports whether namespace ns is being deleted: then what
// the GitSync applied there goes with it, and its ServiceAccount may be
// gone already, so it prunes nothing (or it would hold the namespace's
// deletion up).
func (r *GitSyncReconciler) namespaceGoing(ctx context.Context, ns string) bool {
	n := &corev1.Namespace{}
	return r.Live.Get(ctx, client.ObjectKey{Name: ns}, n) == nil && !n.DeletionTimestamp.IsZero()
}

// forget drops what was kept for a GitSync that is gone, and withdraws
// its claims from other GitSyncs' status.
func (r *GitSyncReconciler) forget(ctx context.Context, key types.NamespacedName) {
	r.mu.Lock()
	delete(r.syncs, key)
	r.mu.Unlock()
	r.Pool.Leave(key.String())
	r.contest(ctx, &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, nil)
}

// requestedSince is when the fetch of gs's sync must have started at the
// earliest: when an unanswered requested-at annotation asks for a sync
// now, its time (the value, when it is one; else now), so a sync asked
// for never reuses an older fetch; otherwise any fetch in the pool's
// window will do.
func requestedSince(gs *gitopsv1alpha1.GitSync) time.Time {
	v := gs.Annotations[AnnotationRequestedAt]
	if v == "" || v == gs.Status.LastHandledReconcileAt {
		return time.Time{}
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil && !t.After(time.Now()) {
		return t
	}
	return time.Now()
}

// countsByKind turns counts by kind into the status's, sorted.
func countsByKind(by map[string]int) []gitopsv1alpha1.KindCount {
	out := make([]gitopsv1alpha1.KindCount, 0, len(by))
	for k, n := range by {
		out = append(out, gitopsv1alpha1.KindCount{Kind: k, Count: int32(n)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}
