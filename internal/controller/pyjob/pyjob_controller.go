// SPDX-License-Identifier: Apache-2.0

// Package pyjob reconciles each PyJob into an Indexed batch/v1 Job (and
// its Service and output claim), holds every PyJob to the workload policy,
// restarts a failed run as its failurePolicy says, and reports the run's
// phase honestly from its Job and worker pods.
package pyjob

import (
	"context"
	"fmt"
	"strings"
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
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/apierr"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/workload"
)

// The PyJob's condition types and reasons, beside the shared ones of
// package status.
const (
	ReasonJobDeleted = "JobDeleted"
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

// Reconciler runs each PyJob as a batch/v1 Job.
type Reconciler struct {
	children.Deps

	// Policy is the workload policy every PyJob is held to, however it
	// was created.
	Policy workload.Policy
	// Logs reads the end of a container's log, for what its termination
	// message is too short to hold (nil: never).
	Logs LogTail
	// Positions reads where queued PyJobs wait in Kueue's queues (nil:
	// their status gives no position).
	Positions QueuePositions

	// verdicts are the workload policy's answers, once per PyJob.
	verdicts verdicts
	// watchesWorkloads is set when the cluster served Kueue's Workloads at
	// start: their changes queue the PyJob, and no timer is needed.
	watchesWorkloads bool
}

// +kubebuilder:rbac:groups=training.trainops.dev,resources=pyjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=training.trainops.dev,resources=pyjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get

// SetupWithManager registers the reconciler; it watches the Jobs and
// Services it owns so status follows them at once.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	// Every event is queued fairly among namespaces (see fairness): the
	// builder's For and Owns take no handler, so the same watches are
	// made with Watches.
	fair := &fairness{}
	owner := handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &trainingv1alpha1.PyJob{}, handler.OnlyControllerOwner())
	b := ctrl.NewControllerManagedBy(mgr).
		// Status writes (its own among them) need no reconcile: only spec,
		// label and annotation changes do.
		Watches(&trainingv1alpha1.PyJob{}, fair.handler(&handler.EnqueueRequestForObject{}), children.SpecChanged).
		Watches(&batchv1.Job{}, fair.handler(owner), children.ChildEvents).
		Watches(&corev1.Service{}, fair.handler(owner), children.ChildEvents, ctrlbuilder.OnlyMetadata).
		Watches(&corev1.Pod{}, fair.handler(podOwner), ctrlbuilder.WithPredicates(stuckChanged))
	if wl := workloadWatch(mgr.GetRESTMapper()); wl != nil {
		// Kueue changes a queued Job's Workload, not the Job: its
		// metadata says when to read Kueue's verdict again.
		r.watchesWorkloads = true
		b = b.Watches(wl, fair.handler(handler.EnqueueRequestsFromMapFunc(workloadPyJob)), ctrlbuilder.OnlyMetadata)
	}
	// The PyJobs a sync held are queued once it is done.
	b = r.WatchReleases(b, &trainingv1alpha1.PyJobList{}, func(o client.Object) bool {
		pj, ok := o.(*trainingv1alpha1.PyJob)
		return ok && firstStatus(pj)
	}, fair.handler)
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: r.Config.MaxConcurrentReconciles, RateLimiter: status.ErrorBackoff[reconcile.Request]()}).
		Named("pyjob").
		Complete(r)
}

// Reconcile brings one PyJob's children and status up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pj := &trainingv1alpha1.PyJob{}
	if ok, err := children.Load(ctx, r.Client, req.NamespacedName, pj); !ok {
		// Owner references garbage-collect the Job and Service; the output
		// claim has none and is kept.
		if err == nil {
			r.verdicts.forget(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	// A new PyJob of a sync still applying the revision it came from
	// waits for that sync (see children.SyncHold): nothing of it is
	// computed meanwhile, not even the policy's verdict.
	if firstStatus(pj) {
		if res, held := r.HeldNew(ctx, pj); held {
			return res, nil
		}
	}
	refused, err := r.refusals(ctx, pj)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(refused) > 0 {
		return status.WithStatus(ctx, r.Client, pj, func() (ctrl.Result, error) { return r.refuse(pj, refused) }, nil)
	}
	job, jobErr := r.cachedJob(ctx, pj)
	if jobErr == nil {
		if res, done := r.createJob(ctx, pj, job); done {
			return res, nil
		}
	}
	before := pj.Status.Phase
	return status.WithStatus(ctx, r.Client, pj,
		func() (ctrl.Result, error) { return r.reconcile(ctx, pj, job, jobErr) },
		func() { r.recordTransition(ctx, pj, before) })
}

// cachedJob reads pj's Job from the informer cache; nil when it does not
// exist.
func (r *Reconciler) cachedJob(ctx context.Context, pj *trainingv1alpha1.PyJob) (*batchv1.Job, error) {
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
func (r *Reconciler) reconcile(ctx context.Context, pj *trainingv1alpha1.PyJob, job *batchv1.Job, jobErr error) (ctrl.Result, error) {
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
		if !children.IsGone(err) {
			log.FromContext(ctx).Error(err, "reconcile children")
		}
		return children.Failed(r.Recorder, pj, err, r.Config.RetryDelay)
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
	var res ctrl.Result
	if queued(pj, job) {
		obs.queue = r.readQueueState(ctx, pj, job)
		// Where Kueue says the position, it is read again too: others move
		// the line while this Workload stays as it is, and no watch says
		// so.
		if !r.watchesWorkloads || obs.queue.inLine {
			res.RequeueAfter = queuedPoll
		}
		if !r.watchesWorkloads && obs.queue.message == "" {
			// Kueue has not given its verdict yet: it soon will.
			res.RequeueAfter = verdictPoll
		}
	}
	applyPyJobStatus(pj, obs, computePyJobPhase(pj, obs))
	return res, nil
}

// createJob is the first of two passes for a new PyJob (no status yet, no
// Job): it creates the Job, and the output claim its pods mount, and
// nothing else, and queues the second pass, the usual reconcile, below
// every first pass (secondPassPriority). A single new PyJob sees no
// difference; a revision bringing thousands has every Job created, and so
// queued for GPUs, before the Services, statuses and Events, the dearer
// writes, compete with them. torchrun waits for the Service's DNS name in
// its rendezvous, so a worker that starts before the Service exists loses
// nothing. Nothing is kept between the passes: the second reads the Job
// from the cluster, and a PyJob whose first status is being written had
// its Job created by a first pass (firstStatus).
//
// done reports that this reconcile is over and res says when to come back.
// When done is false the caller reconciles as usual.
func (r *Reconciler) createJob(ctx context.Context, pj *trainingv1alpha1.PyJob, job *batchv1.Job) (res ctrl.Result, done bool) {
	if !needsJob(pj, job) || !firstStatus(pj) {
		return ctrl.Result{}, false
	}
	built, err := builder.ForPyJob(pj)
	if err != nil {
		return ctrl.Result{}, false // the usual path reports it
	}
	a := r.Applier()
	objs := []client.Object{built.Job}
	if built.OutputClaim != nil {
		objs = []client.Object{built.OutputClaim, built.Job}
	}
	for _, o := range objs {
		if _, _, err := a.Apply(ctx, o, children.MetadataAnswer); err != nil {
			log.FromContext(ctx).V(1).Info("first pass could not create the Job; reconciling as usual", "error", err.Error())
			return ctrl.Result{}, false
		}
	}
	return ctrl.Result{RequeueAfter: secondPassDelay, Priority: ptr.To(secondPassPriority)}, true
}

// The second pass of a PyJob whose Job was just created is queued behind
// every first pass: Jobs first, bookkeeping after.
const (
	// secondPassPriority is below every priority the fair queue gives a
	// first pass (lowestFair) and the initial list's (-100).
	secondPassPriority = -lowestFair - 1
	// secondPassDelay lets the cache see the Job first.
	secondPassDelay = 10 * time.Millisecond
)

// firstStatus reports whether pj's status has never been written: its
// reconcile is the first to write one.
func firstStatus(pj *trainingv1alpha1.PyJob) bool {
	return pj.Status.Phase == "" && pj.Status.ObservedGeneration == 0
}

// needsJob reports whether pj's Job is missing and must be created for
// its first attempt: a finished or started run's Job is recreated only by
// a restart or rerun (pyjob_restart.go).
func needsJob(pj *trainingv1alpha1.PyJob, job *batchv1.Job) bool {
	return job == nil && !finished(pj) && pj.Status.StartTime == nil && !restarting(pj)
}

// reconcileChildren applies the output claim, Service and Job, and returns
// the Job as observed (nil when it does not exist yet), starting from job
// and jobErr as cachedJob read them. A finished PyJob's Job is never
// recreated, nor a started one's: a PyJob runs once.
func (r *Reconciler) reconcileChildren(ctx context.Context, pj *trainingv1alpha1.PyJob, job *batchv1.Job, jobErr error) (*batchv1.Job, error) {
	if jobErr != nil {
		return nil, jobErr
	}
	if job == nil && (finished(pj) || pj.Status.StartTime != nil) && !restarting(pj) {
		return nil, nil
	}
	built, err := builder.ForPyJob(pj)
	if err != nil {
		return job, reconcile.TerminalError(err)
	}
	a := r.Applier().ReportingTo(r.Recorder, pj)
	var applied *unstructured.Unstructured
	var changes children.ChangeLog
	defer changes.Record(r.Recorder, pj)
	r.noteStorage(pj)
	conditions.Delete(pj, JobUpToDateCondition)
	for _, o := range built.Objects() {
		// Only the Job's answer is read, for the status.
		res, u, err := a.Apply(ctx, o, children.AnswerIf(o == built.Job))
		if err != nil && o == client.Object(built.Job) && job != nil && apierrors.IsInvalid(err) {
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
		if res == children.Created || firstStatus(pj) && isFirstPassChild(o, built) {
			// What a first pass created is reported with the first status.
			changes.Add(children.Created, o)
		}
	}
	// Just written: the cache has not seen it yet, so take the status
	// from the server's answer and save a second status write.
	if written := (&batchv1.Job{}); children.DecodeAnswer(applied, written) {
		return written, nil
	}
	return job, nil
}

// isFirstPassChild reports whether o is what createJob creates: the Job
// and the output claim.
func isFirstPassChild(o client.Object, built builder.PyJobChildren) bool {
	return o == client.Object(built.Job) || built.OutputClaim != nil && o == client.Object(built.OutputClaim)
}

// recordTransition emits an Event when the phase changed.
func (r *Reconciler) recordTransition(ctx context.Context, pj *trainingv1alpha1.PyJob, before trainingv1alpha1.PyJobPhase) {
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
	case trainingv1alpha1.PyJobQueued:
		if q := pj.Status.Queue; q != nil && evicted(q.Reason) {
			r.Recorder.Eventf(pj, nil, corev1.EventTypeWarning, q.Reason, "Evict", "%s", pj.Status.Message)
			break
		}
		r.Recorder.Eventf(pj, nil, corev1.EventTypeNormal, ReasonQueued, "Queue", "%s", pj.Status.Message)
	case trainingv1alpha1.PyJobPending:
		if before == trainingv1alpha1.PyJobSuspended {
			r.Recorder.Eventf(pj, nil, corev1.EventTypeNormal, "Resumed", "Resume", "%s", pj.Status.Message)
		}
	}
	if before == trainingv1alpha1.PyJobQueued && (after == trainingv1alpha1.PyJobPending || after == trainingv1alpha1.PyJobRunning) {
		r.Recorder.Eventf(pj, nil, corev1.EventTypeNormal, ReasonAdmitted, "Admit", "queue %s admitted the Job: %s", pj.Spec.QueueName, pj.Status.Message)
	}
}

// noteStorage sets the Storage condition from builder.StorageWarnings, and
// records a Warning Event when what it says changes: a path with no
// storage behind it is valid, but loses data or finds none.
func (r *Reconciler) noteStorage(pj *trainingv1alpha1.PyJob) {
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
