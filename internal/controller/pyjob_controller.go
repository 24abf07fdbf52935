// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/apierr"
	"github.com/trainops/trainops/internal/builder"
)

// PyJobReconciler runs each PyJob as a batch/v1 Job.
type PyJobReconciler struct {
	Deps

	// Logs reads the end of a container's log, for what its termination
	// message is too short to hold (nil: never).
	Logs LogTail

	// fresh holds, per PyJob, what a first pass created (see createJob)
	// until the second pass records it.
	fresh sync.Map // types.NamespacedName → freshJob
}

// freshJob is what a first pass created, for the second pass's Event.
type freshJob struct {
	created []string
	at      time.Time
}

// The second pass of a PyJob whose Job was just created is queued behind
// every pending first reconcile: Jobs first, bookkeeping after.
const (
	// secondPassPriority is below the priority-queue's initial-list items
	// (-100), so that after a restart, too, every missing Job is created
	// before any second pass runs.
	secondPassPriority = -200
	// freshWait bounds how long a second pass waits for the informer cache
	// to see the Job the first pass created, and for the first passes in
	// flight; after it, the second pass runs regardless (applying the Job
	// again if the cache still lacks it, which is harmless), so a steady
	// stream of new PyJobs cannot starve it.
	freshWait = 5 * time.Second
	// freshPoll is how soon a waiting second pass tries again.
	freshPoll = 10 * time.Millisecond
)

// +kubebuilder:rbac:groups=training.trainops.dev,resources=pyjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=training.trainops.dev,resources=pyjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get

// SetupWithManager registers the reconciler; it watches the Jobs and
// Services it owns so status follows them at once.
func (r *PyJobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.JobsFirst == nil {
		r.JobsFirst = &JobsFirst{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		// Status writes (its own among them) need no reconcile: only spec,
		// label and annotation changes do.
		For(&trainingv1alpha1.PyJob{}, specChanged).
		Owns(&batchv1.Job{}, childEvents).
		Owns(&corev1.Service{}, childEvents, ctrlbuilder.OnlyMetadata).
		Watches(&corev1.Pod{}, podOwner, ctrlbuilder.WithPredicates(stuckChanged)).
		WatchesRawSource(r.wake.source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Config.MaxConcurrentReconciles, RateLimiter: errorBackoff[reconcile.Request]()}).
		Named("pyjob").
		Complete(r)
}

// Reconcile brings one PyJob's children and status up to date.
func (r *PyJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.Gate.Held() {
		// A large revision is landing: this PyJob is woken once it has,
		// and its worker is free meanwhile. When its Job will then be
		// created, the other kinds wait for that from the moment the
		// Gate opens, not only once a first pass has begun.
		var end func()
		if r.firstPassDue(ctx, req.NamespacedName) {
			end = r.JobsFirst.begin()
		}
		if r.wake.park(r.Gate, &trainingv1alpha1.PyJob{}, req.NamespacedName, end) {
			return ctrl.Result{}, nil
		}
		if end != nil {
			end()
		}
	}
	pj := &trainingv1alpha1.PyJob{}
	if ok, err := load(ctx, r.Client, req.NamespacedName, pj); !ok {
		// Owner references garbage-collect the Job and Service; the output
		// claim has none and is kept.
		r.fresh.Delete(req.NamespacedName)
		return ctrl.Result{}, err
	}
	job, jobErr := r.cachedJob(ctx, pj)
	if jobErr == nil {
		if res, done := r.createJob(ctx, pj, job); done {
			return res, nil
		}
	}
	before := pj.Status.Phase
	return withStatus(ctx, r.Client, pj,
		func() (ctrl.Result, error) { return r.reconcile(ctx, pj, job, jobErr) },
		func() { r.recordTransition(ctx, pj, before) })
}

// cachedJob reads pj's Job from the informer cache; nil when it does not
// exist.
func (r *PyJobReconciler) cachedJob(ctx context.Context, pj *trainingv1alpha1.PyJob) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	err := r.Get(ctx, types.NamespacedName{Namespace: pj.Namespace, Name: builder.JobName(pj)}, job)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get Job %s: %w", builder.JobName(pj), err)
	}
	return job, nil
}

// reconcile applies the children and computes the status; job and jobErr
// are what cachedJob read.
func (r *PyJobReconciler) reconcile(ctx context.Context, pj *trainingv1alpha1.PyJob, job *batchv1.Job, jobErr error) (ctrl.Result, error) {
	if jobErr == nil && r.rerun(pj) {
		return ctrl.Result{RequeueAfter: restartPoll}, nil
	}
	if jobErr == nil && restarting(pj) {
		wait, err := r.stopOldAttempt(ctx, pj, job)
		if err != nil || wait {
			return ctrl.Result{RequeueAfter: restartPoll}, err
		}
	}
	job, err := r.reconcileChildren(ctx, pj, job, jobErr)
	if err != nil {
		log.FromContext(ctx).Error(err, "reconcile children")
		return failed(r.Recorder, pj, err, r.Config.RetryDelay)
	}
	restarted(pj, job)
	obs := pyjobObservation{job: job}
	if c := failedCondition(job); c != nil && !finished(pj) && !restarting(pj) {
		disrupted, exited := r.workerFailure(ctx, job)
		f := classifyFailure(c, disrupted, exited)
		d := decideRestart(pj, f)
		if d.restart {
			r.beginRestart(pj, d)
			return ctrl.Result{RequeueAfter: restartPoll}, nil
		}
		obs.failure, obs.failureReason = d.message, d.reason
	}
	if job != nil && !finished(pj) && ptr.Deref(job.Status.Ready, 0) < max(pj.Spec.Workers, 1) {
		obs.stuckReason, obs.stuck = r.stuckWorker(ctx, pj.Namespace, pj.Name)
		if obs.stuck != "" && obs.stuck != pj.Status.Message {
			r.Recorder.Eventf(pj, nil, corev1.EventTypeWarning, obs.stuckReason, "Start", "%s", obs.stuck)
		}
	}
	applyPyJobStatus(pj, obs, computePyJobPhase(pj, obs))
	return ctrl.Result{}, nil
}

// createJob is the first of two passes for a PyJob whose Job does not exist
// yet: it creates the Job, and the output claim its pods mount, and nothing
// else. The headless Service, the status and the Created Event follow in a
// second pass, queued at secondPassPriority and waiting for the first
// passes in flight. A single new PyJob sees no difference; a revision
// bringing thousands has every Job created, and so queued for GPUs, before
// any second pass competes with the Job creations for the API server. torchrun waits for the Service's DNS name in its
// rendezvous, so a worker that starts before the Service exists loses
// nothing.
//
// done reports that this reconcile is over and res says when to come back.
// When done is false the caller reconciles as usual: the Job exists (or
// must not be created), or the first pass could not create it and the
// usual path retries and reports why.
func (r *PyJobReconciler) createJob(ctx context.Context, pj *trainingv1alpha1.PyJob, job *batchv1.Job) (res ctrl.Result, done bool) {
	key := client.ObjectKeyFromObject(pj)
	secondPass := ctrl.Result{RequeueAfter: freshPoll, Priority: ptr.To(secondPassPriority)}
	if v, ok := r.fresh.Load(key); ok {
		// A second pass. It waits until no first pass is in flight, so the
		// last Jobs of a burst do not compete with it either, and until
		// the cache has this Job, so it is not applied (and reported)
		// twice.
		if time.Since(v.(freshJob).at) < freshWait && (r.JobsFirst.inFlight() || job == nil) {
			return secondPass, true
		}
		return ctrl.Result{}, false
	}
	if !needsJob(pj, job) {
		return ctrl.Result{}, false
	}
	children, err := builder.ForPyJob(pj)
	if err != nil {
		return ctrl.Result{}, false // the usual path reports it
	}
	defer r.JobsFirst.begin()()
	a := newApplier(r.Client, r.APIReader)
	var changes changeLog
	objs := []client.Object{children.Job}
	if children.OutputClaim != nil {
		objs = []client.Object{children.OutputClaim, children.Job}
	}
	for _, o := range objs {
		did, err := a.apply(ctx, o)
		if err != nil {
			log.FromContext(ctx).V(1).Info("first pass could not create the Job; reconciling as usual", "error", err.Error())
			changes.record(r.Recorder, pj)
			return ctrl.Result{}, false
		}
		changes.add(did, o)
	}
	r.fresh.Store(key, freshJob{created: changes.created, at: time.Now()})
	return secondPass, true
}

// needsJob reports whether pj's Job is missing and must be created for
// its first attempt: a finished or started run's Job is recreated only by
// a restart or rerun (pyjob_restart.go).
func needsJob(pj *trainingv1alpha1.PyJob, job *batchv1.Job) bool {
	return job == nil && !finished(pj) && pj.Status.StartTime == nil && !restarting(pj)
}

// firstPassDue reports, from the cache, whether the PyJob named key will
// get a first pass: it exists, its Job does not, and no first pass has
// created it yet.
func (r *PyJobReconciler) firstPassDue(ctx context.Context, key types.NamespacedName) bool {
	if _, ok := r.fresh.Load(key); ok {
		return false
	}
	pj := &trainingv1alpha1.PyJob{}
	if err := r.Get(ctx, key, pj); err != nil || !pj.DeletionTimestamp.IsZero() {
		return false
	}
	job, err := r.cachedJob(ctx, pj)
	return err == nil && needsJob(pj, job)
}

// reconcileChildren applies the output claim, Service and Job, and returns
// the Job as observed (nil when it does not exist yet), starting from job
// and jobErr as cachedJob read them. A finished PyJob's Job is never
// recreated, nor a started one's: a PyJob runs once.
func (r *PyJobReconciler) reconcileChildren(ctx context.Context, pj *trainingv1alpha1.PyJob, job *batchv1.Job, jobErr error) (*batchv1.Job, error) {
	if jobErr != nil {
		return nil, jobErr
	}
	if job == nil && (finished(pj) || pj.Status.StartTime != nil) && !restarting(pj) {
		return nil, nil
	}
	children, err := builder.ForPyJob(pj)
	if err != nil {
		return job, reconcile.TerminalError(err)
	}
	a := newApplier(r.Client, r.APIReader).reportingTo(r.Recorder, pj)
	var applied *unstructured.Unstructured
	var changes changeLog
	if v, ok := r.fresh.LoadAndDelete(client.ObjectKeyFromObject(pj)); ok {
		changes.created = v.(freshJob).created
	}
	defer changes.record(r.Recorder, pj)
	r.noteStorage(pj)
	conditions.Delete(pj, JobUpToDateCondition)
	for _, o := range children.Objects() {
		// Only the Job's answer is read, for the status.
		res, u, err := a.applyReading(ctx, o, children.Job)
		if err != nil && o == client.Object(children.Job) && job != nil && apierrors.IsInvalid(err) {
			// The Job exists, built from an earlier configuration, and
			// its pod template cannot change in place: it runs as
			// created, and the status says so rather than stall.
			conditions.MarkFalse(pj, JobUpToDateCondition, ReasonImmutable,
				"Job %s differs from what this PyJob builds now and cannot be changed in place (%s): it runs as created; to run the new spec, give the PyJob a new name", job.Name, apierr.Message(err))
			continue
		}
		if err != nil {
			return job, err
		}
		if u != nil {
			applied = u
		}
		if res == created {
			changes.add(res, o)
		}
	}
	// Just written: the cache has not seen it yet, so take the status
	// from the server's answer and save a second status write.
	if written := (&batchv1.Job{}); decodeAnswer(applied, written) {
		return written, nil
	}
	return job, nil
}

// recordTransition emits an Event when the phase changed.
func (r *PyJobReconciler) recordTransition(ctx context.Context, pj *trainingv1alpha1.PyJob, before trainingv1alpha1.PyJobPhase) {
	after := pj.Status.Phase
	if after == before {
		return
	}
	log.FromContext(ctx).Info("Reconcile: PyJob phase changed", "from", before, "to", after, "message", pj.Status.Message)
	switch after {
	case trainingv1alpha1.PyJobRunning:
		r.Recorder.Eventf(pj, nil, corev1.EventTypeNormal, "Started", "Run", "%s", pj.Status.Message)
	case trainingv1alpha1.PyJobSucceeded:
		r.Recorder.Eventf(pj, nil, corev1.EventTypeNormal, "Succeeded", "Run", "%s", pj.Status.Message)
	case trainingv1alpha1.PyJobFailed:
		r.Recorder.Eventf(pj, nil, corev1.EventTypeWarning, "Failed", "Run", "%s", pj.Status.Message)
	case trainingv1alpha1.PyJobSuspended:
		r.Recorder.Eventf(pj, nil, corev1.EventTypeNormal, "Suspended", "Suspend", "%s", pj.Status.Message)
	case trainingv1alpha1.PyJobPending:
		if before == trainingv1alpha1.PyJobSuspended {
			r.Recorder.Eventf(pj, nil, corev1.EventTypeNormal, "Resumed", "Resume", "%s", pj.Status.Message)
		}
	}
}

// noteStorage sets the Storage condition from builder.StorageWarnings, and
// records a Warning Event when what it says changes: a path with no
// storage behind it is valid, but loses data or finds none.
func (r *PyJobReconciler) noteStorage(pj *trainingv1alpha1.PyJob) {
	ws := builder.StorageWarnings(pj)
	if len(ws) == 0 {
		conditions.Delete(pj, StorageCondition)
		return
	}
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.String()
	}
	msg := strings.Join(parts, "; ")
	if conditions.GetMessage(pj, StorageCondition) != msg {
		r.Recorder.Eventf(pj, nil, corev1.EventTypeWarning, ReasonNoStorage, "Check", "%s", msg)
	}
	conditions.MarkFalse(pj, StorageCondition, ReasonNoStorage, "%s", msg)
}
