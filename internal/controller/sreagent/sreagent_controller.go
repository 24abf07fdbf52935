// SPDX-License-Identifier: Apache-2.0

// Package sreagent reconciles each SREAgent into a Deployment with the
// ServiceAccount and namespace-scoped RBAC its permissions allow.
package sreagent

import (
	"context"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/controller/gpustack"
	"github.com/trainops/trainops/internal/status"
)

// Reconciler runs each SREAgent as a Deployment with a
// namespace-scoped ServiceAccount, Role and RoleBinding.
type Reconciler struct {
	children.Deps
}

// trainops must hold every permission it grants an agent's Role (RBAC's
// escalation check), hence the pods, events and pyjobs rules below.
//
// +kubebuilder:rbac:groups=aiops.trainops.dev,resources=sreagents,verbs=get;list;watch
// +kubebuilder:rbac:groups=aiops.trainops.dev,resources=sreagents/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=get;list;watch;create;patch

// SetupWithManager registers the reconciler and the children it watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		// Its own status writes need no reconcile: only spec, label and
		// annotation changes do.
		For(&aiopsv1alpha1.SREAgent{}, children.SpecChanged).
		Owns(&appsv1.Deployment{}, children.ChildEvents).
		Owns(&corev1.ServiceAccount{}, children.ChildEvents).
		Owns(&rbacv1.Role{}, children.ChildEvents).
		Owns(&rbacv1.RoleBinding{}, children.ChildEvents).
		// The active ClusterPolicy names the DCGM exporter agents read:
		// which one is active and its spec matter, not its status.
		Watches(&gpuv1alpha1.ClusterPolicy{}, handler.EnqueueRequestsFromMapFunc(r.gpuAgents), ctrlbuilder.WithPredicates(predicate.GenerationChangedPredicate{}))
	// The SREAgents a sync held are queued once it is done.
	return r.WatchReleases(b, &aiopsv1alpha1.SREAgentList{}, children.Unreconciled, nil).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Config.MaxConcurrentReconciles, RateLimiter: status.ErrorBackoff[reconcile.Request]()}).
		Named("sreagent").
		Complete(r)
}

// gpuAgents lists the SREAgents that read a DCGM exporter.
func (r *Reconciler) gpuAgents(ctx context.Context, _ client.Object) []reconcile.Request {
	var list aiopsv1alpha1.SREAgentList
	if err := r.List(ctx, &list); err != nil {
		log.FromContext(ctx).Error(err, "list SREAgents for a ClusterPolicy change")
		return nil
	}
	var out []reconcile.Request
	for _, a := range list.Items {
		if a.Spec.GPUEnable {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&a)})
		}
	}
	return out
}

// Reconcile brings one SREAgent's children and status up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := &aiopsv1alpha1.SREAgent{}
	if res, ok, err := r.Begin(ctx, req, a); !ok {
		return res, err
	}
	wasReady := conditions.IsReady(a)
	return status.WithStatus(ctx, r.Client, a, func() (ctrl.Result, error) { return r.reconcile(ctx, a) }, func() {
		if wasReady != conditions.IsReady(a) {
			log.FromContext(ctx).Info("Reconcile: SREAgent readiness changed", "ready", conditions.IsReady(a), "message", conditions.GetMessage(a, status.ReadyCondition))
		}
		if !wasReady && conditions.IsReady(a) {
			r.Recorder.Eventf(a, nil, corev1.EventTypeNormal, "RolledOut", "RollOut", "%s", conditions.GetMessage(a, status.ReadyCondition))
		}
	})
}

func (r *Reconciler) reconcile(ctx context.Context, a *aiopsv1alpha1.SREAgent) (ctrl.Result, error) {
	// A GPU-watching agent reads the active ClusterPolicy's exporter.
	opts := builder.Options{AgentImage: r.Config.AgentImage}
	if a.Spec.GPUEnable {
		cp, err := gpustack.ActivePolicy(ctx, r.Client)
		if err != nil {
			return ctrl.Result{}, err
		}
		opts.DCGMURL = builder.DCGMExporterURL(cp)
	}
	built := builder.ForSREAgent(a, opts)
	ap := r.Applier().ReportingTo(r.Recorder, a)
	var changes children.ChangeLog
	defer changes.Record(r.Recorder, a)
	var applied *unstructured.Unstructured
	for _, o := range built.Objects() {
		// Only the Deployment's answer is read, for the status.
		res, u, err := ap.Apply(ctx, o, children.AnswerIf(o == built.Deployment))
		if u != nil {
			applied = u
		}
		if err != nil {
			if !children.IsGone(err) {
				log.FromContext(ctx).Error(err, "apply")
			}
			return children.Failed(r.Recorder, a, err, r.Config.RetryDelay)
		}
		changes.Add(res, o)
	}
	// Children under an earlier name (before their names were prefixed)
	// go once the new ones are applied.
	lists := map[string]client.ObjectList{
		"Deployment":     &appsv1.DeploymentList{},
		"ServiceAccount": &corev1.ServiceAccountList{},
		"Role":           &rbacv1.RoleList{},
		"RoleBinding":    &rbacv1.RoleBindingList{},
	}
	if err := (children.Pruner{Client: r.Client, Recorder: r.Recorder}).Prune(ctx, a, lists, children.WantKeys(built.Objects()), "replaced by "+builder.AgentChildName(a),
		client.InNamespace(a.Namespace), client.MatchingLabels{builder.LabelSREAgent: a.Name}); err != nil {
		return children.Failed(r.Recorder, a, err, r.Config.RetryDelay)
	}
	// Just written: the cache has not seen it yet, so take it from the
	// server's answer rather than write a status that the next reconcile
	// must correct.
	d := &appsv1.Deployment{}
	if !children.DecodeAnswer(applied, d) {
		if err := r.Get(ctx, client.ObjectKeyFromObject(built.Deployment), d); apierrors.IsNotFound(err) {
			d = nil
		} else if err != nil {
			return ctrl.Result{}, err
		}
	}
	applySREAgentStatus(a, d)
	return ctrl.Result{}, nil
}

// applySREAgentStatus computes the status from the Deployment (nil when the
// cache has not seen it yet). It is pure.
func applySREAgentStatus(a *aiopsv1alpha1.SREAgent, d *appsv1.Deployment) {
	if d == nil {
		a.Status.Replicas, a.Status.ReadyReplicas = 0, 0
		status.MarkInProgress(a, status.ReasonProgressing, "creating Deployment %s", builder.AgentChildName(a))
		return
	}
	a.Status.Replicas, a.Status.ReadyReplicas = d.Status.Replicas, d.Status.ReadyReplicas
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	rolledOut := d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want && d.Status.Replicas == want
	available := false
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
			available = true
		}
	}
	if rolledOut && (available || want == 0) && d.Status.AvailableReplicas >= want {
		status.MarkDone(a, true, children.ReasonAvailable, "Deployment %s available: %d/%d replicas ready", d.Name, d.Status.ReadyReplicas, want)
		return
	}
	status.MarkInProgress(a, status.ReasonProgressing, "Deployment %s rolling out: %d/%d replicas updated, %d ready", d.Name, d.Status.UpdatedReplicas, want, d.Status.ReadyReplicas)
}
