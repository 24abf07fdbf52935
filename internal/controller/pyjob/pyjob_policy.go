// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/textsafe"
	"github.com/trainops/trainops/internal/workload"
)

// ReasonRefused says a PyJob asks for what the workload policy refuses.
const ReasonRefused = "Refused"

// refusals is what the workload policy refuses of pj, whoever created it:
// the sync checks a revision before applying it, and this check holds for
// a PyJob made with kubectl or the API too. The namespace's Pod Security
// label is read from the cache.
func (r *Reconciler) refusals(ctx context.Context, pj *trainingv1alpha1.PyJob) ([]string, error) {
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: pj.Namespace}, ns); err != nil {
		return nil, fmt.Errorf("get namespace %s for its Pod Security label: %w", pj.Namespace, err)
	}
	level := ns.Labels[workload.EnforceLabel]
	if refused, ok := r.verdicts.get(pj, level); ok {
		return refused, nil
	}
	refused := r.Policy.PyJob(pj, level)
	r.verdicts.put(pj, level, refused)
	return refused, nil
}

// verdicts remember the workload policy's answer for each PyJob, by its
// UID, generation and namespace label: a PyJob's spec cannot change but
// for suspend, which the policy does not read, and the policy is fixed
// for the process, so the answer (the pod built, merged and evaluated) is
// computed once per PyJob, not on every reconcile of it.
type verdicts struct{ m sync.Map }

type verdict struct {
	uid        types.UID
	generation int64
	level      string
	refused    []string
}

func (v *verdicts) get(pj *trainingv1alpha1.PyJob, level string) ([]string, bool) {
	got, ok := v.m.Load(client.ObjectKeyFromObject(pj))
	if !ok {
		return nil, false
	}
	d := got.(verdict)
	if d.uid != pj.UID || d.generation != pj.Generation || d.level != level {
		return nil, false
	}
	return d.refused, true
}

func (v *verdicts) put(pj *trainingv1alpha1.PyJob, level string, refused []string) {
	v.m.Store(client.ObjectKeyFromObject(pj), verdict{uid: pj.UID, generation: pj.Generation, level: level, refused: refused})
}

// forget drops the answer of a PyJob that is gone.
func (v *verdicts) forget(key types.NamespacedName) { v.m.Delete(key) }

// refuse stalls a PyJob the policy refuses: nothing of it is applied
// (a Job it already has keeps running as created), its Ready and Stalled
// conditions name each field and the setting, and a Warning Event says
// so once per message. Its spec cannot change but for suspend, so it is
// not retried: trainops's restart with other settings looks again.
func (r *Reconciler) refuse(pj *trainingv1alpha1.PyJob, refused []string) (ctrl.Result, error) {
	msg := textsafe.Join(refused, "; ", textsafe.MessageBytes)
	if conditions.GetReason(pj, status.StalledCondition) != ReasonRefused || conditions.GetMessage(pj, status.StalledCondition) != msg {
		r.Recorder.Eventf(pj, nil, corev1.EventTypeWarning, ReasonRefused, "Check", "%s", msg)
	}
	status.MarkStalled(pj, ReasonRefused, "%s", msg)
	pj.Status.Message = msg
	return ctrl.Result{}, reconcile.TerminalError(errors.New("refused by the workload policy: " + msg))
}
