// SPDX-License-Identifier: Apache-2.0

// Package remediation takes failing GPU nodes out of service and returns
// them when healthy, as the active ClusterPolicy's spec.remediation says,
// reading each node's DCGM exporter and conditions.
package remediation

import (
	"context"
	"maps"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/controller/gpustack"
	"github.com/trainops/trainops/internal/gpuhealth"
	"github.com/trainops/trainops/internal/status"
)

// The reasons of GPUNodesHealthyCondition.
const (
	ReasonAllInService      = "AllInService"
	ReasonNodesOutOfService = "NodesOutOfService"
)

// simulatedNodeAnnotation is kwok's mark of a node it simulates.
const simulatedNodeAnnotation = "kwok.x-k8s.io/node"

// remediationKey is the one work item of the remediation reconciler: a
// pass looks at every GPU node at once, as maxUnavailable counts them all.
var remediationKey = reconcile.Request{NamespacedName: client.ObjectKey{Name: "gpu-nodes"}}

// Reconciler takes the GPU nodes that fail out of service, as
// the active ClusterPolicy's spec.remediation says: it taints, cordons and
// drains them, at most maxUnavailable at once, and returns them once
// healthy. What it needs between passes is on the nodes (its taint and
// RemediationAnnotation), so a restart or a fail-over loses nothing.
type Reconciler struct {
	children.Deps
	// Dial connects to an exporter (nil: a plain TCP dial).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ReadSimulatedNodes reads the exporters of nodes kwok simulates too,
	// for tests whose Dial answers for them.
	ReadSimulatedNodes bool
	// Now is the clock (nil: time.Now).
	Now gpustack.Clock
	// heat is since when each node's GPUs read hot.
	heat gpuhealth.Heat
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list

// SetupWithManager registers the reconciler: a ClusterPolicy's spec
// changing, and a GPU node's conditions, taints, cordon or remediated
// label changing, start a pass; a pass comes again every interval.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{remediationKey} })
	return ctrl.NewControllerManagedBy(mgr).
		Named("remediation").
		Watches(&gpuv1alpha1.ClusterPolicy{}, one, ctrlbuilder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Node{}, one, ctrlbuilder.WithPredicates(nodeHealthChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, RateLimiter: status.ErrorBackoff[reconcile.Request]()}).
		Complete(r)
}

// nodeHealthChanged passes the node events a pass acts on: a GPU node's
// conditions (not their heartbeats), taints, cordon or labels changing.
var nodeHealthChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return e.Object.GetLabels()[builder.LabelGPUPresent] == "true" },
	DeleteFunc: func(event.DeleteEvent) bool { return true },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Node)
		n, ok2 := e.ObjectNew.(*corev1.Node)
		if !ok1 || !ok2 || n.Labels[builder.LabelGPUPresent] != "true" && o.Labels[builder.LabelGPUPresent] != "true" {
			return false
		}
		return !maps.Equal(o.Labels, n.Labels) || o.Spec.Unschedulable != n.Spec.Unschedulable || !equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
			conditionsKey(o) != conditionsKey(n)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// conditionsKey is what of a node's conditions a pass reads.
func conditionsKey(n *corev1.Node) string {
	key := ""
	for _, c := range n.Status.Conditions {
		key += string(c.Type) + "=" + string(c.Status) + "/" + c.Reason + ";"
	}
	return key
}

// Reconcile runs one pass over the GPU nodes.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	cp, nodes, err := gpustack.NodesOf(r.Deps).PolicyAndNodes(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if cp == nil || !cp.Spec.Remediation.Enabled {
		return ctrl.Result{}, r.returnAll(ctx, cp, nodes)
	}
	spec := cp.Spec.Remediation
	interval := gpustack.DurationOr(spec.Interval, 30*time.Second)
	now := r.Now.Time()
	views, err := r.view(ctx, cp, nodes, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	plan := planRemediation(spec, views, now)
	drains, err := r.carryOut(ctx, cp, views, plan, now)
	if err != nil {
		return ctrl.Result{}, err
	}
	msg, allIn := plan.summary(views, drains)
	reason := ReasonNodesOutOfService
	if allIn {
		reason = ReasonAllInService
	}
	if err := gpustack.NodesOf(r.Deps).SetPolicyCondition(ctx, cp, gpustack.GPUNodesHealthyCondition, allIn, reason, msg); err != nil {
		return ctrl.Result{}, err
	}
	observeRemediation(views, plan)
	for _, d := range drains {
		if d.Remaining > 0 {
			// Evictions finish, or a budget allows them, soon: look again
			// before the interval.
			return ctrl.Result{RequeueAfter: min(interval, 5*time.Second)}, nil
		}
	}
	return ctrl.Result{RequeueAfter: interval}, nil
}

// view reads every GPU node's health and record.
func (r *Reconciler) view(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, nodes []corev1.Node, now time.Time) ([]nodeView, error) {
	spec := cp.Spec.Remediation
	simulated := map[string]bool{}
	for _, n := range nodes {
		simulated[n.Name] = n.Annotations[simulatedNodeAnnotation] == "fake"
	}
	targets, err := r.exporterTargets(ctx, cp, simulated)
	if err != nil {
		return nil, err
	}
	th := gpuhealth.Thresholds{}
	if spec.MaxGPUTemperature != nil {
		th.MaxTemperature = float64(*spec.MaxGPUTemperature)
	}
	exporters := r.exporterHealth(ctx, targets, gpustack.DurationOr(spec.Interval, 30*time.Second), th)
	exporterOn := gpustack.Enabled(cp.Spec.DCGM.Exporter.Enabled)
	var views []nodeView
	for i := range nodes {
		n := &nodes[i]
		if n.Labels[builder.LabelGPUPresent] != "true" {
			continue
		}
		h, ok := exporters[n.Name]
		switch {
		case ok || !exporterOn:
		case simulated[n.Name] && !r.ReadSimulatedNodes:
			h = nodeHealth{health: healthUnknown, unknown: "a node kwok simulates: its exporter is not read"}
		default:
			h = nodeHealth{health: healthUnknown, unknown: "no ready DCGM exporter pod of the ClusterPolicy serves it"}
		}
		if h.health != healthUnknown {
			h = healthOf(r.heat.Sustained(n.Name, h.problems, now, gpustack.DurationOr(spec.GPUTemperatureFor, 5*time.Minute)))
		} else {
			r.heat.Sustained(n.Name, nil, now, 0) // an unknown reading starts the wait again
		}
		v := nodeView{node: n, state: stateOf(n, now), health: h.withConditions(n, spec.NodeConditions)}
		if v.state != nil && v.health.health == healthGood {
			pods, err := gpustack.NodesOf(r.Deps).PodsOn(ctx, n.Name)
			if err != nil {
				return nil, err
			}
			v.driverRestarted, v.pods = gpustack.DriverRestartedOn(pods, cp, v.state.Since.Time), pods
		}
		views = append(views, v)
	}
	gpuNodes := make(map[string]bool, len(views))
	for _, v := range views {
		gpuNodes[v.node.Name] = true
	}
	r.heat.Retain(gpuNodes)
	return views, nil
}

// carryOut applies the plan to the nodes, drains every node out of
// service, and reports the problems only reported.
func (r *Reconciler) carryOut(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, views []nodeView, plan remediationPlan, now time.Time) (map[string]gpustack.DrainResult, error) {
	drains := map[string]gpustack.DrainResult{}
	for _, v := range views {
		n := v.node
		for _, p := range v.health.problems {
			if p.Action == gpuhealth.Report {
				remediationReported.WithLabelValues(metricCause(p)).Inc()
				r.Recorder.Eventf(n, nil, corev1.EventTypeWarning, "GPUProblemReported", "Remediate", "%s", p.Message)
			}
		}
		if why, ok := plan.giveBack[n.Name]; ok {
			if err := r.giveBack(ctx, cp, n, why); err != nil {
				return nil, err
			}
			continue
		}
		state := v.state
		if s, ok := plan.takeOut[n.Name]; ok {
			prob, _ := v.health.firstOutOfService()
			if err := r.takeOut(ctx, cp, n, s, prob.Message); err != nil {
				return nil, err
			}
			state = s
		} else if s, ok := plan.update[n.Name]; ok {
			if err := gpustack.NodesOf(r.Deps).PatchNode(ctx, n, func(n *corev1.Node) { setRecord(n, s) }); err != nil {
				return nil, err
			}
		} else if s, ok := plan.waiting[n.Name]; ok {
			r.Recorder.Eventf(n, cp, corev1.EventTypeWarning, "NodeOutOfServiceWaiting", "Remediate", "node %s fails (%s) and stays in service: maxUnavailable (%d) GPU nodes are out of service already", n.Name, s, plan.limit)
		}
		if state == nil {
			continue
		}
		pods := v.pods
		if pods == nil {
			var err error
			if pods, err = gpustack.NodesOf(r.Deps).PodsOn(ctx, n.Name); err != nil {
				return nil, err
			}
		}
		if _, now := plan.takeOut[n.Name]; now {
			r.noteFailedPods(n, state, pods)
		}
		d, err := gpustack.NodesOf(r.Deps).Drain(ctx, n, state.Since.Time, cp.Spec.Remediation.Drain, "out of service ("+state.Cause+")", pods, now)
		if err != nil {
			return nil, err
		}
		drains[n.Name] = d
	}
	return drains, nil
}

// noteFailedPods records, on each failed pod of a PyJob on a node just
// taken out of service, that its node failed: the pod's failure may be
// the node's, and an SREAgent with autoRepair in that namespace starts a
// new run of its PyJob.
func (r *Reconciler) noteFailedPods(n *corev1.Node, s *outOfService, pods []corev1.Pod) {
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodFailed && p.Labels[builder.LabelPyJob] != "" {
			r.Recorder.Eventf(p, n, corev1.EventTypeWarning, gpuv1alpha1.NodeOutOfServiceReason, "Remediate", "node %s, where this pod ran, was taken out of service (%s)", n.Name, s.Cause)
		}
	}
}

// takeOut taints and cordons a node, records why, and says so.
func (r *Reconciler) takeOut(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, n *corev1.Node, s *outOfService, why string) error {
	err := gpustack.NodesOf(r.Deps).PatchNode(ctx, n, func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: gpuv1alpha1.RemediationTaintKey, Value: s.Cause, Effect: corev1.TaintEffectNoSchedule})
		n.Spec.Unschedulable = true
		setRecord(n, s)
	})
	if err != nil {
		return err
	}
	r.Recorder.Eventf(n, cp, corev1.EventTypeWarning, gpuv1alpha1.NodeOutOfServiceReason, "Remediate", "tainted %s=%s:NoSchedule and cordoned: %s", gpuv1alpha1.RemediationTaintKey, s.Cause, why)
	r.Recorder.Eventf(cp, n, corev1.EventTypeWarning, gpuv1alpha1.NodeOutOfServiceReason, "Remediate", "node %s out of service: %s", n.Name, why)
	return nil
}

// giveBack removes trainops's taint, record and the remediated label, and
// uncordons the node if trainops cordoned it. Another's taint stays.
func (r *Reconciler) giveBack(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, n *corev1.Node, why string) error {
	s := stateOf(n, r.Now.Time())
	err := gpustack.NodesOf(r.Deps).PatchNode(ctx, n, func(n *corev1.Node) {
		var keep []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != gpuv1alpha1.RemediationTaintKey {
				keep = append(keep, t)
			}
		}
		n.Spec.Taints = keep
		if s != nil && s.Cordoned {
			n.Spec.Unschedulable = false
		}
		delete(n.Annotations, gpuv1alpha1.RemediationAnnotation)
		delete(n.Labels, gpuv1alpha1.RemediatedLabel)
	})
	if err != nil {
		return err
	}
	if cp == nil {
		// No ClusterPolicy (it was deleted): a nil *ClusterPolicy is not
		// a nil related object to the recorder.
		r.Recorder.Eventf(n, nil, corev1.EventTypeNormal, "NodeReturned", "Remediate", "returned to service: %s", why)
		return nil
	}
	r.Recorder.Eventf(n, cp, corev1.EventTypeNormal, "NodeReturned", "Remediate", "returned to service: %s", why)
	r.Recorder.Eventf(cp, n, corev1.EventTypeNormal, "NodeReturned", "Remediate", "node %s returned to service: %s", n.Name, why)
	return nil
}

// returnAll gives back every node trainops took out, when no ClusterPolicy
// asks for remediation any more. The ClusterPolicy reconciler removes the
// GPUNodesHealthy condition then.
func (r *Reconciler) returnAll(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, nodes []corev1.Node) error {
	for i := range nodes {
		if _, ok := ownTaint(&nodes[i]); !ok {
			continue
		}
		if err := r.giveBack(ctx, cp, &nodes[i], "remediation is off"); err != nil {
			return err
		}
	}
	remediationOutOfService.Reset()
	remediationWaiting.Set(0)
	remediationUnknown.Set(0)
	return nil
}

func setRecord(n *corev1.Node, s *outOfService) {
	gpustack.SetJSONAnnotation(n, gpuv1alpha1.RemediationAnnotation, s)
}
