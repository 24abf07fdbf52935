// SPDX-License-Identifier: Apache-2.0

// Package status is how trainops's reconcilers, and the GitSync's, write
// an object's status: kstatus's conditions (Ready, Reconciling, Stalled,
// from fluxcd/pkg/apis/meta), the observed generation, and one patch per
// reconcile that writes only what the reconcile changed, onto the live
// conditions where other writers share the list.
package status

import (
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	"k8s.io/client-go/util/workqueue"
)

// kstatus's condition types.
const (
	// ReadyCondition is True when the object is what its spec asks,
	// False when it failed, Unknown while the work is in progress.
	ReadyCondition = meta.ReadyCondition
	// ReconcilingCondition is True while work is in progress.
	ReconcilingCondition = meta.ReconcilingCondition
	// StalledCondition is True when nothing progresses until the spec
	// changes.
	StalledCondition = meta.StalledCondition
)

// Reasons every kind uses.
const (
	ReasonProgressing = meta.ProgressingReason
	ReasonSucceeded   = meta.SucceededReason
	ReasonApplyFailed = "ApplyFailed"
	ReasonSuspended   = "Suspended"
	// ReasonPrerequisiteMissing: something trainops does not install is
	// missing.
	ReasonPrerequisiteMissing = "PrerequisiteMissing"
)

// MarkInProgress sets kstatus's in-progress conditions: Reconciling, and
// Ready Unknown (not yet known, as kstatus reads it).
func MarkInProgress(obj conditions.Setter, reason, format string, args ...any) {
	conditions.MarkUnknown(obj, ReadyCondition, reason, format, args...)
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

// Settled reports whether a reconcile that returned err succeeded for the
// object's generation, so that status.observedGeneration may say so (as in
// Flux and Cluster API: `kubectl wait` and kstatus read it): no error, no
// stall, no wait for a prerequisite and no failed apply.
func Settled(obj conditions.Getter, err error) bool {
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
