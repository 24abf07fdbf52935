package controller

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainops/trainops/internal/builder"
)

// ReasonNotOwned is the Stalled reason of an object whose child's name is
// taken by an object trainops did not create.
const ReasonNotOwned = "ChildNotOwned"

// ownerLabels are the labels naming the object a child belongs to.
var ownerLabels = []string{builder.LabelPyJob, builder.LabelSREAgent, builder.LabelClusterPolicy}

// notOwnedError says a child's name is taken by an object trainops did not
// create, which it therefore never changes.
type notOwnedError struct {
	kind, key, why string
}

func (e *notOwnedError) Error() string {
	return fmt.Sprintf("%s %s exists and %s: trainops never changes an object it did not create; rename the owner, or delete or rename that object", e.kind, e.key, e.why)
}

// owns checks that current, the live object of desired's name, is the one
// trainops made for desired's owner. A child with an owner reference must
// be controlled by that same owner (same UID); one without (a training
// output claim, kept when its PyJob goes) must carry trainops's labels for
// that owner. Otherwise it is someone else's: a ServiceAccount an admin
// bound to cluster-admin, a GPU Operator's DaemonSet.
func owns(desired, current client.Object) error {
	kind := desired.GetObjectKind().GroupVersionKind().Kind
	fail := func(why string) error {
		return reconcile.TerminalError(&notOwnedError{kind: kind, key: objectKey(desired), why: why})
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

// isNotOwned reports whether err is owns's refusal.
func isNotOwned(err error) bool {
	var e *notOwnedError
	return errors.As(err, &e)
}
