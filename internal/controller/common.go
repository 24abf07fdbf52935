// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"errors"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/workload"
)

// childEvents filters the events of owned children. A child's creation
// needs no reconcile: trainops created it, and the reconcile that did took
// its state from the API server's answer. Every owner is reconciled at
// start-up anyway, so the initial list of children adds nothing either.
// Updates (status, drift) and deletions do reconcile the owner. Without
// this, each new PyJob was reconciled once per child it created, each time
// re-applying a Job the cache had not seen yet and writing status again.
var childEvents = ctrlbuilder.WithPredicates(predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }})

// specChanged filters the events of a reconciled object itself: spec,
// label and annotation changes reconcile it; its own status writes do not.
var specChanged = ctrlbuilder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))

// Condition types and reasons shared by the three kinds.
const (
	// ReadyCondition is kstatus's Ready.
	ReadyCondition = "Ready"
	// ReconcilingCondition is kstatus's Reconciling: work in progress.
	ReconcilingCondition = "Reconciling"
	// StalledCondition is kstatus's Stalled: no progress until the spec
	// changes.
	StalledCondition = "Stalled"

	ReasonProgressing        = "Progressing"
	ReasonApplyFailed        = "ApplyFailed"
	ReasonSucceeded          = "Succeeded"
	ReasonSuspended          = "Suspended"
	ReasonJobDeleted         = "JobDeleted"
	ReasonAvailable          = "Available"
	ReasonIgnored            = "Ignored"
	ReasonComponentsNotReady = "ComponentsNotReady"
	// ReasonNodeOSUnknown: GPU nodes lack the OS labels their driver
	// image is chosen by.
	ReasonNodeOSUnknown = "NodeOSUnknown"
	// ReasonDriftCorrected is the Event of a child applied back after
	// someone changed a field trainops manages.
	ReasonDriftCorrected = "DriftCorrected"
	// ReasonPrerequisiteMissing: something trainops does not install is
	// missing (see waitError).
	ReasonPrerequisiteMissing = "PrerequisiteMissing"

	// JobUpToDateCondition is False while a PyJob's Job differs from what
	// the PyJob builds now in a field that cannot change (ReasonImmutable).
	JobUpToDateCondition = "JobUpToDate"
	ReasonImmutable      = "Immutable"
	// StorageCondition is False (ReasonNoStorage) while a PyJob's
	// datasetPath or outputPath has no storage behind it (see
	// builder.StorageWarnings); a Warning Event says so when it turns False.
	StorageCondition = "Storage"
	ReasonNoStorage  = "NoStorage"
)

// statusPatcher writes an object's status in one request: a JSON merge
// patch of the fields the reconcile changed, or nothing when it changed
// nothing. Each field it writes has one writer, the object's own reconcile,
// so the patch carries no optimistic lock: a lock against a cached
// resourceVersion one write behind would only turn into conflicts (see
// docs/design.md). A field with other writers (a GitSync's
// status.contested) is never changed through it, but written apart, read
// live and under a lock (pruneContested, setContested).
type statusPatcher struct {
	client client.Client
	before client.Object
}

// newStatusPatcher remembers obj as read, before the reconcile changes it.
func newStatusPatcher(c client.Client, obj client.Object) *statusPatcher {
	return &statusPatcher{client: c, before: obj.DeepCopyObject().(client.Object)}
}

// patch writes obj's status when it differs from the one last written
// (or read); what it wrote is the base of the next.
func (p *statusPatcher) patch(ctx context.Context, obj client.Object) error {
	data, err := client.MergeFrom(p.before).Data(obj)
	if err != nil {
		return err
	}
	if string(data) == "{}" {
		return nil
	}
	err = p.client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, data), client.FieldOwner(builder.FieldManager))
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile
	}
	if err == nil {
		p.before = obj.DeepCopyObject().(client.Object)
	}
	return err
}

// stalled reports whether err will not go away by retrying: the API server
// rejected what trainops built from the spec.
func stalled(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || errors.Is(err, reconcile.TerminalError(nil))
}

// failed records err, from applying children, in obj's conditions (and a
// conflict in an Event) and says when to try again.
//
//   - A child's name taken by someone else's object, or a prerequisite
//     trainops does not install (waitError), is a planned wait: obj is
//     looked at again after retry, as deleting that object or installing
//     the prerequisite is no change trainops would be told of.
//   - An object the API server refuses stalls obj until its spec changes:
//     a terminal error, not retried.
//   - Anything else is returned, so that controller-runtime retries it
//     with a backoff of its own per object (ErrorBackoff).
func failed(rec events.EventRecorder, obj conditions.Setter, err error, retry time.Duration) (ctrl.Result, error) {
	var wait *waitError
	switch {
	case isConflict(err):
		if conditions.GetReason(obj, StalledCondition) != ReasonConflict || conditions.GetMessage(obj, StalledCondition) != err.Error() {
			// Once per conflict, not once per retry.
			rec.Eventf(obj, nil, corev1.EventTypeWarning, ReasonConflict, "Apply", "%v", err)
		}
		MarkStalled(obj, ReasonConflict, "%v", err)
		return ctrl.Result{RequeueAfter: retry}, nil
	case errors.As(err, &wait):
		MarkInProgress(obj, wait.reason, "%v (looked at again every %s)", err, retry)
		return ctrl.Result{RequeueAfter: retry}, nil
	case stalled(err):
		MarkStalled(obj, ReasonApplyFailed, "%v", err)
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	MarkInProgress(obj, ReasonApplyFailed, "%v (retrying)", err)
	return ctrl.Result{}, err
}

// waitError says a reconcile cannot go on until something trainops does
// not manage is in place, such as a ClusterRole of the install manifests.
type waitError struct {
	reason string
	msg    string
}

func (e *waitError) Error() string { return e.msg }

// settled reports whether a reconcile that returned err succeeded for the
// object's generation, so that status.observedGeneration may say so (as in
// Flux and Cluster API: `kubectl wait` and kstatus read it): no error, no
// stall, no wait for a prerequisite and no failed apply.
func settled(obj conditions.Getter, err error) bool {
	if err != nil || conditions.IsStalled(obj) {
		return false
	}
	switch conditions.GetReason(obj, ReconcilingCondition) {
	case ReasonApplyFailed, ReasonPrerequisiteMissing:
		return false
	}
	return true
}

// ErrorBackoff is how a reconcile that failed is retried, per object:
// after minRetry, doubling up to maxRetry. An API server that is down or
// overloaded is not hammered, and one object failing does not slow others.
func ErrorBackoff[T comparable]() workqueue.TypedRateLimiter[T] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[T](minRetry, maxRetry)
}

// The bounds of ErrorBackoff.
const (
	minRetry = 500 * time.Millisecond
	maxRetry = 5 * time.Minute
)

// MarkInProgress sets kstatus's in-progress conditions.
func MarkInProgress(obj conditions.Setter, reason, format string, args ...any) {
	conditions.MarkFalse(obj, ReadyCondition, reason, format, args...)
	conditions.MarkReconciling(obj, reason, format, args...)
	conditions.Delete(obj, StalledCondition)
}

// MarkDone sets kstatus's settled conditions: Ready with the given status.
func MarkDone(obj conditions.Setter, ready bool, reason, format string, args ...any) {
	if ready {
		conditions.MarkTrue(obj, ReadyCondition, reason, format, args...)
	} else {
		conditions.MarkFalse(obj, ReadyCondition, reason, format, args...)
	}
	conditions.Delete(obj, ReconcilingCondition)
	conditions.Delete(obj, StalledCondition)
}

// MarkStalled says the object cannot progress until its spec changes.
func MarkStalled(obj conditions.Setter, reason, format string, args ...any) {
	conditions.MarkFalse(obj, ReadyCondition, reason, format, args...)
	conditions.MarkStalled(obj, reason, format, args...)
	conditions.Delete(obj, ReconcilingCondition)
}

// Deps are what each of trainops's reconcilers works with: one definition,
// embedded by PyJobReconciler, SREAgentReconciler and
// ClusterPolicyReconciler.
type Deps struct {
	client.Client
	Recorder events.EventRecorder
	// APIReader reads live from the API server, for the names of children
	// the cache does not hold (nil: Client).
	APIReader client.Reader
	Config    config.Controllers
	// Policy is the workload policy every PyJob is held to, however it
	// was created.
	Policy workload.Policy
	// Hold holds back a sync's own new PyJobs while it applies them (nil:
	// none; see SyncHold).
	Hold SyncHold
	// compared remembers the children found unchanged, shared by the
	// reconcilers of one manager (nil: none; every applied child is
	// compared again).
	compared *comparedChildren
}

// comparedChildrenSize bounds the children one manager remembers as found
// unchanged: about every child of a large cluster.
const comparedChildrenSize = 20000
