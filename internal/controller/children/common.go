// SPDX-License-Identifier: Apache-2.0

package children

import (
	"errors"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/status"
)

// ChildEvents filters the events of owned children. A child's creation
// needs no reconcile: trainops created it, and the reconcile that did took
// its state from the API server's answer. Every owner is reconciled at
// start-up anyway, so the initial list of children adds nothing either.
// Updates (status, drift) and deletions do reconcile the owner. Without
// this, each new PyJob was reconciled once per child it created, each time
// re-applying a Job the cache had not seen yet and writing status again.
var ChildEvents = ctrlbuilder.WithPredicates(predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }})

// SpecChanged filters the events of a reconciled object itself: spec,
// label and annotation changes reconcile it; its own status writes do not.
var SpecChanged = ctrlbuilder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))

// Reasons more than one kind's conditions and Events give.
const (
	// ReasonAvailable: the workload (an agent's Deployment, the GPU
	// stack's DaemonSets) is available.
	ReasonAvailable = "Available"
	// ReasonDriftCorrected is the Event of a child applied back after
	// someone changed a field trainops manages.
	ReasonDriftCorrected = "DriftCorrected"
)

// stalled reports whether err will not go away by retrying: the API server
// rejected what trainops built from the spec.
func stalled(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || errors.Is(err, reconcile.TerminalError(nil))
}

// Failed records err, from applying children, in obj's conditions (and a
// conflict in an Event) and says when to try again.
//
//   - A child deleted or replaced since the cache read it (GoneError) is
//     no failure: obj's status stays, and it is looked at again.
//   - A child's name taken by someone else's object, or a prerequisite
//     trainops does not install (WaitError), is a planned wait: obj is
//     looked at again after retry, as deleting that object or installing
//     the prerequisite is no change trainops would be told of.
//   - An object the API server refuses stalls obj until its spec changes:
//     a terminal error, not retried.
//   - Anything else is returned, so that controller-runtime retries it
//     with a backoff of its own per object (status.ErrorBackoff).
func Failed(rec events.EventRecorder, obj conditions.Setter, err error, retry time.Duration) (ctrl.Result, error) {
	var wait *WaitError
	switch {
	case IsGone(err):
		// The deletion's own event reconciles again; the retry is in
		// case it was missed. Nothing failed: the status stays.
		return ctrl.Result{RequeueAfter: retry}, nil
	case IsConflict(err):
		if conditions.GetReason(obj, status.StalledCondition) != ReasonConflict || conditions.GetMessage(obj, status.StalledCondition) != err.Error() {
			// Once per conflict, not once per retry.
			rec.Eventf(obj, nil, corev1.EventTypeWarning, ReasonConflict, "Apply", "%v", err)
		}
		status.MarkStalled(obj, ReasonConflict, "%v", err)
		return ctrl.Result{RequeueAfter: retry}, nil
	case errors.As(err, &wait):
		status.MarkInProgress(obj, wait.Reason, "%v (looked at again every %s)", err, retry)
		return ctrl.Result{RequeueAfter: retry}, nil
	case stalled(err):
		status.MarkStalled(obj, status.ReasonApplyFailed, "%v", err)
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	status.MarkInProgress(obj, status.ReasonApplyFailed, "%v (retrying)", err)
	return ctrl.Result{}, err
}

// WaitError says a reconcile cannot go on until something trainops does
// not manage is in place, such as a ClusterRole of the install manifests.
type WaitError struct {
	Reason string
	Msg    string
}

func (e *WaitError) Error() string { return e.Msg }

// Deps are what each of trainops's workload reconcilers works with: one
// definition, embedded by the reconcilers of packages pyjob, sreagent,
// clusterpolicy, remediation and driverupgrade.
type Deps struct {
	client.Client
	Recorder events.EventRecorder
	// APIReader reads live from the API server, for the names of children
	// the cache does not hold (nil: Client).
	APIReader client.Reader
	Config    config.Controllers
	// Compared remembers the children found unchanged, shared by the
	// reconcilers of one manager (nil: none; every applied child is
	// compared again).
	Compared *Compared
	// Hold holds back a sync's own new objects while it applies them
	// (nil: none; see SyncHold).
	Hold SyncHold
}

// ComparedSize bounds the children one manager remembers as found
// unchanged: about every child of a large cluster.
const ComparedSize = 20000

// Live reads from the API server (APIReader), for what the cache
// does not hold.
func (d Deps) Live() client.Reader {
	if d.APIReader != nil {
		return d.APIReader
	}
	return d.Client
}
