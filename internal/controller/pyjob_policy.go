// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/textsafe"
	"github.com/trainops/trainops/internal/workload"
)

// ReasonRefused says a PyJob asks for what the workload policy refuses.
const ReasonRefused = "Refused"

// refusals is what the workload policy refuses of pj, whoever created it:
// the sync checks a revision before applying it, and this check holds for
// a PyJob made with kubectl or the API too. The namespace's Pod Security
// label is read from the cache.
func (r *PyJobReconciler) refusals(ctx context.Context, pj *trainingv1alpha1.PyJob) ([]string, error) {
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: pj.Namespace}, ns); err != nil {
		return nil, fmt.Errorf("get namespace %s for its Pod Security label: %w", pj.Namespace, err)
	}
	return r.Policy.PyJob(pj, ns.Labels[workload.EnforceLabel]), nil
}

// refuse stalls a PyJob the policy refuses: nothing of it is applied
// (a Job it already has keeps running as created), its Ready and Stalled
// conditions name each field and the setting, and a Warning Event says
// so once per message. Its spec cannot change but for suspend, so it is
// not retried: trainops's restart with other settings looks again.
func (r *PyJobReconciler) refuse(pj *trainingv1alpha1.PyJob, refused []string) (ctrl.Result, error) {
	msg := textsafe.Join(refused, "; ", textsafe.MessageBytes)
	if conditions.GetReason(pj, StalledCondition) != ReasonRefused || conditions.GetMessage(pj, StalledCondition) != msg {
		r.Recorder.Eventf(pj, nil, corev1.EventTypeWarning, ReasonRefused, "Check", "%s", msg)
	}
	MarkStalled(pj, ReasonRefused, "%s", msg)
	pj.Status.Message = msg
	return ctrl.Result{}, reconcile.TerminalError(errors.New("refused by the workload policy: " + msg))
}
