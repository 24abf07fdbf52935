package controller

import (
	"errors"

	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/fluxcd/pkg/runtime/patch"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Condition types and reasons shared by the three kinds.
const (
	// ReadyCondition is kstatus's Ready.
	ReadyCondition = "Ready"
	// ReconcilingCondition is kstatus's Reconciling: work in progress.
	ReconcilingCondition = "Reconciling"
	// StalledCondition is kstatus's Stalled: no progress until the spec
	// changes.
	StalledCondition = "Stalled"

	ReasonProgressing    = "Progressing"
	ReasonApplyFailed    = "ApplyFailed"
	ReasonSucceeded      = "Succeeded"
	ReasonSuspended      = "Suspended"
	ReasonJobDeleted     = "JobDeleted"
	ReasonAvailable      = "Available"
	ReasonIgnored        = "Ignored"
	ReasonComponentsDown = "ComponentsNotReady"
)

// ownedConditions are the conditions the controllers own in status patches.
var ownedConditions = []string{ReadyCondition, ReconcilingCondition, StalledCondition}

// patchOptions are the options of every status patch.
func patchOptions(extra ...string) []patch.Option {
	return []patch.Option{
		patch.WithOwnedConditions{Conditions: append(append([]string(nil), ownedConditions...), extra...)},
		patch.WithFieldOwner(FieldManager),
	}
}

// stalled reports whether err will not go away by retrying: the API server
// rejected what trainops built from the spec.
func stalled(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || errors.Is(err, reconcile.TerminalError(nil))
}

// markInProgress sets kstatus's in-progress conditions.
func markInProgress(obj conditions.Setter, reason, format string, args ...any) {
	conditions.MarkFalse(obj, ReadyCondition, reason, format, args...)
	conditions.MarkReconciling(obj, reason, format, args...)
	conditions.Delete(obj, StalledCondition)
}

// markDone sets kstatus's settled conditions: Ready with the given status.
func markDone(obj conditions.Setter, ready bool, reason, format string, args ...any) {
	if ready {
		conditions.MarkTrue(obj, ReadyCondition, reason, format, args...)
	} else {
		conditions.MarkFalse(obj, ReadyCondition, reason, format, args...)
	}
	conditions.Delete(obj, ReconcilingCondition)
	conditions.Delete(obj, StalledCondition)
}

// markStalled says the object cannot progress until its spec changes.
func markStalled(obj conditions.Setter, reason, format string, args ...any) {
	conditions.MarkFalse(obj, ReadyCondition, reason, format, args...)
	conditions.MarkStalled(obj, reason, format, args...)
	conditions.Delete(obj, ReconcilingCondition)
}
