// SPDX-License-Identifier: Apache-2.0

package children

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainops/trainops/internal/builder"
)

// ReasonConflict is the Stalled (and Ready) reason of an object whose
// child's name is taken by an object trainops did not create, or whose
// work another controller already does.
const ReasonConflict = "Conflict"

// ownerLabels are the labels naming the object a child belongs to.
var ownerLabels = []string{builder.LabelPyJob, builder.LabelSREAgent, builder.LabelClusterPolicy}

// ConflictError says trainops will not do something because it would take
// over what another owner holds; it is retried, as that owner may go.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// GoneError says a child was deleted or replaced between the read that
// found it and the write to it: nothing was written, and the reconcile is
// done again once the cache has seen the change.
type GoneError struct{ Msg string }

func (e *GoneError) Error() string { return e.Msg }

// IsGone reports whether err is a GoneError.
func IsGone(err error) bool {
	var e *GoneError
	return errors.As(err, &e)
}

// IsConflict reports whether err is a ConflictError.
func IsConflict(err error) bool {
	var e *ConflictError
	return errors.As(err, &e)
}

// managers lists o's field managers, in order, once each: who holds it.
func managers(o client.Object) []string {
	var out []string
	for _, m := range o.GetManagedFields() {
		if m.Manager != "" && !slices.Contains(out, m.Manager) {
			out = append(out, m.Manager)
		}
	}
	return out
}

// owns checks that current, the live object of desired's name, is the one
// trainops made for desired's owner. A child with an owner reference must
// be controlled by that same owner (same UID); one without (a training
// output claim, kept when its PyJob goes) must carry trainops's labels for
// that owner. Otherwise it is someone else's: a ServiceAccount an admin
// bound to cluster-admin, a GPU Operator's DaemonSet.
func owns(desired, current client.Object) error {
	fail := func(why string) error {
		held := ""
		if m := managers(current); len(m) > 0 {
			held = " (managed by " + strings.Join(m, ", ") + ")"
		}
		return reconcile.TerminalError(&ConflictError{Msg: fmt.Sprintf(
			"%s %s exists and %s%s: trainops never changes an object it did not create; rename the owner, or delete or rename that object",
			desired.GetObjectKind().GroupVersionKind().Kind, objectKey(desired), why, held)})
	}
	if want := metav1.GetControllerOfNoCopy(desired); want != nil {
		got := metav1.GetControllerOfNoCopy(current)
		switch {
		case got == nil:
			return fail("is not controlled by trainops")
		case got.UID != want.UID:
			return fail(fmt.Sprintf("is controlled by %s %s, not by %s %s", got.Kind, got.Name, want.Kind, want.Name))
		}
		return nil
	}
	if current.GetLabels()[builder.LabelManagedBy] != builder.ManagedBy {
		return fail("was not created by trainops")
	}
	for _, k := range ownerLabels {
		if v, ok := desired.GetLabels()[k]; ok && current.GetLabels()[k] != v {
			return fail(fmt.Sprintf("belongs to %s=%s, not %s", k, current.GetLabels()[k], v))
		}
	}
	return nil
}
