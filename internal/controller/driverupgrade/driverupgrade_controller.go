// SPDX-License-Identifier: Apache-2.0

// Package driverupgrade rolls a new GPU driver out node by node, as the
// active ClusterPolicy's driver.upgradePolicy says: cordon, drain, restart
// the driver pod, validate, uncordon.
package driverupgrade

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/prometheus/client_golang/prometheus"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/controller/gpustack"
	"github.com/trainops/trainops/internal/status"
)

// driverUpgradeKey is the one work item of the upgrade reconciler: the
// parallel limit counts every node.
var driverUpgradeKey = reconcile.Request{NamespacedName: client.ObjectKey{Name: "driver-upgrade"}}

// Reconciler rolls a new driver out node by node when the active
// ClusterPolicy's driver.upgradePolicy.autoUpgrade is on: once the
// ClusterPolicy's spec is applied and each driver DaemonSet's controller
// has seen its template, cordon, evict the GPU pods, delete the node's
// driver pod (the DaemonSet is OnDelete) and validator pod, wait for the
// new driver to be ready and a new validator pod to have validated it,
// uncordon. Each node's state
// is its nvidia.com/gpu-driver-upgrade-state label; a failed node stops
// the rollout.
type Reconciler struct {
	children.Deps
	// Now is the clock (nil: time.Now).
	Now gpustack.Clock
}

// +kubebuilder:rbac:groups=apps,resources=controllerrevisions,verbs=get;list

// SetupWithManager registers the reconciler: the ClusterPolicy's spec or
// observed generation, a driver DaemonSet or a GPU node's labels changing
// start a pass.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{driverUpgradeKey} })
	isDriver := predicate.NewPredicateFuncs(func(o client.Object) bool { return strings.HasPrefix(o.GetName(), builder.DriverDaemonSet) })
	return ctrl.NewControllerManagedBy(mgr).
		Named("driverupgrade").
		Watches(&gpuv1alpha1.ClusterPolicy{}, one, ctrlbuilder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, specApplied))).
		Watches(&appsv1.DaemonSet{}, one, ctrlbuilder.WithPredicates(isDriver)).
		Watches(&corev1.Node{}, one, ctrlbuilder.WithPredicates(predicate.LabelChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, RateLimiter: status.ErrorBackoff[reconcile.Request]()}).
		Complete(r)
}

// specApplied passes a ClusterPolicy's status write that says its spec is
// applied (status.observedGeneration): a rollout waiting for it goes on.
var specApplied = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*gpuv1alpha1.ClusterPolicy)
	n, ok2 := e.ObjectNew.(*gpuv1alpha1.ClusterPolicy)
	return ok1 && ok2 && o.Status.ObservedGeneration != n.Status.ObservedGeneration
}}

// Reconcile runs one pass of the rollout.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	cp, nodes, err := gpustack.NodesOf(r.Deps).PolicyAndNodes(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if cp == nil || !cp.Spec.Driver.UpgradePolicy.AutoUpgrade || !gpustack.Enabled(cp.Spec.Driver.Enabled) {
		return ctrl.Result{}, r.stopAll(ctx, nodes)
	}
	var drivers appsv1.DaemonSetList
	if err := r.Live().List(ctx, &drivers, client.InNamespace(cp.Spec.Namespace), client.MatchingLabels{builder.LabelClusterPolicy: cp.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list the driver DaemonSets: %w", err)
	}
	waitFor := unsettled(cp, drivers.Items)
	views, err := r.view(ctx, cp, nodes)
	if err != nil {
		return ctrl.Result{}, err
	}
	policy := cp.Spec.Driver.UpgradePolicy
	limit := upgradeLimit(policy, len(views))
	active, failed := 0, false
	for _, u := range views {
		active += boolInt(upgrading(u.state))
		failed = failed || u.state == UpgradeFailed
	}
	now := r.Now.Time()
	for i := range views {
		u := &views[i]
		next, err := r.step(ctx, cp, u, now, waitFor == "" && !failed && active < limit)
		if err != nil {
			return ctrl.Result{}, err
		}
		if next != u.state {
			active += boolInt(upgrading(next)) - boolInt(upgrading(u.state))
			failed = failed || next == UpgradeFailed
			u.state = next
			u.rec = upgradeRecordOf(u.node)
		}
	}
	ok, reason, msg := upgradeSummary(views, waitFor)
	if err := gpustack.NodesOf(r.Deps).SetPolicyCondition(ctx, cp, gpustack.DriverUpgradedCondition, ok, reason, msg); err != nil {
		return ctrl.Result{}, err
	}
	upgradesInProgress.Set(float64(active))
	upgradeLongestInState.Set(longestInState(views, now).Seconds())
	upgradesFailed.Set(float64(countState(views, UpgradeFailed)))
	if waitFor != "" {
		// The ClusterPolicy's and the DaemonSets' status writes start the
		// next pass.
		log.FromContext(ctx).V(1).Info("no node starts until the "+waitFor, "upgrading", active)
	}
	if active > 0 {
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	return ctrl.Result{RequeueAfter: time.Minute}, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func countState(views []upgradeNode, state string) int {
	n := 0
	for _, u := range views {
		n += boolInt(u.state == state)
	}
	return n
}

// view finds each GPU node's driver pod and whether it is current.
func (r *Reconciler) view(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, nodes []corev1.Node) ([]upgradeNode, error) {
	ns := cp.Spec.Namespace
	var pods corev1.PodList
	if err := r.Live().List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{builder.LabelClusterPolicy: cp.Name}); err != nil {
		return nil, fmt.Errorf("list the driver pods: %w", err)
	}
	revisions, err := r.currentRevisions(ctx, cp)
	if err != nil {
		return nil, err
	}
	byNode, validators := map[string]*corev1.Pod{}, map[string]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case !p.DeletionTimestamp.IsZero():
		case strings.HasPrefix(p.Labels["app"], builder.DriverDaemonSet):
			byNode[p.Spec.NodeName] = p
		case p.Labels["app"] == builder.ValidatorDaemonSet:
			validators[p.Spec.NodeName] = p
		}
	}
	var out []upgradeNode
	for i := range nodes {
		n := &nodes[i]
		p := byNode[n.Name]
		if n.Labels[builder.LabelGPUPresent] != "true" || p == nil && n.Labels[UpgradeStateLabel] == "" {
			continue
		}
		u := upgradeNode{node: n, state: n.Labels[UpgradeStateLabel], rec: upgradeRecordOf(n), driver: p, validator: validators[n.Name]}
		if p != nil {
			want, ok := revisions[p.Labels["app"]]
			u.current = ok && p.Labels[appsv1.ControllerRevisionHashLabelKey] == want
			u.ready = gpustack.PodReady(p)
		}
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].node.Name < out[j].node.Name })
	return out, nil
}

// currentRevisions maps each driver DaemonSet's app label to the hash of
// its newest ControllerRevision: a pod of another hash runs an older
// template.
func (r *Reconciler) currentRevisions(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy) (map[string]string, error) {
	var list appsv1.ControllerRevisionList
	if err := r.Live().List(ctx, &list, client.InNamespace(cp.Spec.Namespace), client.MatchingLabels{builder.LabelClusterPolicy: cp.Name}); err != nil {
		return nil, fmt.Errorf("list the driver DaemonSets' revisions: %w", err)
	}
	newest := map[string]*appsv1.ControllerRevision{}
	for i := range list.Items {
		rev := &list.Items[i]
		app := rev.Labels["app"]
		if !strings.HasPrefix(app, builder.DriverDaemonSet) {
			continue
		}
		if cur, ok := newest[app]; !ok || rev.Revision > cur.Revision {
			newest[app] = rev
		}
	}
	out := map[string]string{}
	for app, rev := range newest {
		out[app] = rev.Labels[appsv1.ControllerRevisionHashLabelKey]
	}
	return out, nil
}

// step moves one node on by at most one state; start says whether a new
// node may begin upgrading.
func (r *Reconciler) step(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, u *upgradeNode, now time.Time, start bool) (string, error) {
	policy := cp.Spec.Driver.UpgradePolicy
	switch u.state {
	case "", UpgradeDone:
		if u.driver != nil && !u.current {
			return r.setState(ctx, u, UpgradeRequired, now, "")
		}
		if u.state == "" {
			return r.setState(ctx, u, UpgradeDone, now, "")
		}
	case UpgradeRequired:
		if u.current {
			return r.setState(ctx, u, UpgradeDone, now, "")
		}
		if start {
			return r.cordon(ctx, cp, u, now)
		}
	case DrainRequired:
		pods, err := gpustack.NodesOf(r.Deps).PodsOn(ctx, u.node.Name)
		if err != nil {
			return u.state, err
		}
		if kept := undeletable(pods, policy.PodDeletion); len(kept) > 0 {
			return r.setState(ctx, u, UpgradeFailed, now, "podDeletion keeps GPU pods: "+strings.Join(kept, ", "))
		}
		d, err := gpustack.NodesOf(r.Deps).Drain(ctx, u.node, u.rec.Since.Time, policy.Drain, "driver upgrade", pods, now)
		if err != nil {
			return u.state, err
		}
		if d.Remaining > 0 {
			if d.TimedOut && !policy.Drain.Force {
				return r.setState(ctx, u, UpgradeFailed, now, "its GPU pods could not be evicted: "+d.Message())
			}
			return u.state, nil
		}
		if u.driver != nil && !u.current {
			// The validator goes too: its next pod validates the new
			// driver and writes driver-ready again.
			for _, p := range []*corev1.Pod{u.driver, u.validator} {
				if p == nil {
					continue
				}
				if err := r.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
					return u.state, fmt.Errorf("delete pod %s/%s: %w", p.Namespace, p.Name, err)
				}
			}
			r.Recorder.Eventf(u.node, cp, corev1.EventTypeNormal, "DriverPodDeleted", "Upgrade", "deleted driver pod %s/%s and the node's validator pod: the node is drained, the new driver replaces it", u.driver.Namespace, u.driver.Name)
			u.rec.Restarted = &metav1.Time{Time: now}
		}
		return r.setState(ctx, u, PodRestartRequired, now, "")
	case PodRestartRequired, ValidationRequired, UpgradeFailed:
		return r.validate(ctx, cp, u, now)
	}
	return u.state, nil
}

// validate waits for the node's new driver pod to be ready and a new
// validator pod to have validated it, then uncordons the node; past
// validationTimeout the node fails.
func (r *Reconciler) validate(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, u *upgradeNode, now time.Time) (string, error) {
	if u.driver != nil && u.current && u.ready && u.validated() {
		if err := gpustack.NodesOf(r.Deps).PatchNode(ctx, u.node, func(n *corev1.Node) {
			if u.rec.Cordoned {
				n.Spec.Unschedulable = false
			}
			n.Labels[UpgradeStateLabel] = UpgradeDone
			delete(n.Annotations, upgradeAnnotation)
		}); err != nil {
			return u.state, err
		}
		r.Recorder.Eventf(u.node, cp, corev1.EventTypeNormal, "DriverUpgraded", "Upgrade", "the driver pod %s of the current driver is ready and validator pod %s validated it: node uncordoned", u.driver.Name, u.validator.Name)
		return UpgradeDone, nil
	}
	if u.state == PodRestartRequired && u.driver != nil && u.current {
		return r.setState(ctx, u, ValidationRequired, now, "")
	}
	timeout := gpustack.DurationOr(cp.Spec.Driver.UpgradePolicy.ValidationTimeout, 30*time.Minute)
	if u.state != UpgradeFailed && durationSince(u.rec.Since, now) >= timeout {
		why := fmt.Sprintf("its new driver was not ready within validationTimeout %s", timeout)
		if u.driver != nil && u.current && u.ready {
			why = fmt.Sprintf("its new driver was not validated (no ready validator pod made since the driver restarted) within validationTimeout %s", timeout)
		}
		return r.setState(ctx, u, UpgradeFailed, now, why)
	}
	return u.state, nil
}

// cordon starts a node's upgrade.
func (r *Reconciler) cordon(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, u *upgradeNode, now time.Time) (string, error) {
	rec := upgradeRecord{Since: metav1.NewTime(now), Cordoned: !u.node.Spec.Unschedulable}
	err := gpustack.NodesOf(r.Deps).PatchNode(ctx, u.node, func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		n.Labels[UpgradeStateLabel] = DrainRequired
		setUpgradeRecord(n, rec)
	})
	if err != nil {
		return u.state, err
	}
	r.Recorder.Eventf(u.node, cp, corev1.EventTypeNormal, "DriverUpgradeStarted", "Upgrade", "cordoned for the driver upgrade; its GPU pods are evicted next")
	return DrainRequired, nil
}

// setState labels a node with its new state, noting since when.
func (r *Reconciler) setState(ctx context.Context, u *upgradeNode, state string, now time.Time, failure string) (string, error) {
	rec := u.rec
	rec.Since, rec.Failure = metav1.NewTime(now), failure
	err := gpustack.NodesOf(r.Deps).PatchNode(ctx, u.node, func(n *corev1.Node) {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[UpgradeStateLabel] = state
		if state == UpgradeDone {
			delete(n.Annotations, upgradeAnnotation)
		} else {
			setUpgradeRecord(n, rec)
		}
	})
	if err != nil {
		return u.state, err
	}
	if state == UpgradeFailed {
		r.Recorder.Eventf(u.node, nil, corev1.EventTypeWarning, "DriverUpgradeFailed", "Upgrade", "driver upgrade failed, the rollout stopped: %s", failure)
	}
	return state, nil
}

func setUpgradeRecord(n *corev1.Node, rec upgradeRecord) {
	gpustack.SetJSONAnnotation(n, upgradeAnnotation, rec)
}

// stopAll takes the upgrade's label and note off every node, uncordoning
// those trainops cordoned, when autoUpgrade is off.
func (r *Reconciler) stopAll(ctx context.Context, nodes []corev1.Node) error {
	for i := range nodes {
		n := &nodes[i]
		if n.Labels[UpgradeStateLabel] == "" && n.Annotations[upgradeAnnotation] == "" {
			continue
		}
		rec := upgradeRecordOf(n)
		if err := gpustack.NodesOf(r.Deps).PatchNode(ctx, n, func(n *corev1.Node) {
			if rec.Cordoned {
				n.Spec.Unschedulable = false
			}
			delete(n.Labels, UpgradeStateLabel)
			delete(n.Annotations, upgradeAnnotation)
		}); err != nil {
			return err
		}
	}
	upgradesInProgress.Set(0)
	upgradeLongestInState.Set(0)
	upgradesFailed.Set(0)
	return nil
}

// The metrics of driver upgrades.
var (
	upgradesInProgress = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "trainops_gpu_driver_upgrades_in_progress",
		Help: "GPU nodes whose driver is being upgraded (drain, pod restart or validation).",
	})
	upgradeLongestInState = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "trainops_gpu_driver_upgrade_longest_in_state_seconds",
		Help: "How long the GPU node longest in one upgrading state (drain, pod restart or validation) has been in it; 0 when no node is upgrading.",
	})
	upgradesFailed = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "trainops_gpu_driver_upgrades_failed",
		Help: "GPU nodes whose driver upgrade failed; while above 0 the rollout is stopped.",
	})
)

func init() {
	metrics.Registry.MustRegister(upgradesInProgress, upgradeLongestInState, upgradesFailed)
}
