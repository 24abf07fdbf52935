// SPDX-License-Identifier: Apache-2.0

package clusterpolicy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller/gpustack"
)

// NodeReconciler labels GPU nodes for the active ClusterPolicy's
// components, as the GPU Operator does: nvidia.com/gpu.present=true and
// nvidia.com/gpu.deploy.<component>=true on every node that Node Feature
// Discovery found an NVIDIA PCI device on, or that advertises
// nvidia.com/gpu. The DaemonSets select those labels. It only ever patches
// node labels and one annotation.
type NodeReconciler struct {
	client.Client
	Config config.Controllers
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch

// SetupWithManager registers the reconciler: a node's labels or capacity
// changing reconcile it, and a ClusterPolicy created, deleted or with a
// new spec reconciles every node.
func (r *NodeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Node{}, ctrlbuilder.WithPredicates(nodeChanged)).
		// Only a ClusterPolicy's creation, deletion or spec change can change
		// the labels: its status writes would re-reconcile every node.
		Watches(&gpuv1alpha1.ClusterPolicy{}, handler.EnqueueRequestsFromMapFunc(r.allNodes), ctrlbuilder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Config.MaxConcurrentReconciles}).
		Named("gpunode").
		Complete(r)
}

// nodeChanged passes node events that can change its labelling: creation,
// deletion, and updates of labels, annotations or capacity (not the
// heartbeats that make most node updates).
var nodeChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Node)
		n, ok2 := e.ObjectNew.(*corev1.Node)
		if !ok1 || !ok2 {
			return true
		}
		return !maps.Equal(o.Labels, n.Labels) || o.Annotations[builder.AnnotationNodeLabels] != n.Annotations[builder.AnnotationNodeLabels] ||
			!o.Status.Capacity[builder.GPUResource].Equal(n.Status.Capacity[builder.GPUResource])
	},
}

func (r *NodeReconciler) allNodes(ctx context.Context, _ client.Object) []reconcile.Request {
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		log.FromContext(ctx).Error(err, "list nodes to label")
		return nil
	}
	out := make([]reconcile.Request, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: n.Name}})
	}
	return out
}

// Reconcile brings one node's GPU labels up to date.
func (r *NodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	n := &corev1.Node{}
	if err := r.Get(ctx, req.NamespacedName, n); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cp, err := gpustack.ActivePolicy(ctx, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	plan := builder.PlanNodeLabels(n, cp)
	if !plan.Changes(n.Annotations[builder.AnnotationNodeLabels]) {
		return ctrl.Result{}, nil
	}
	labels := map[string]any{}
	for _, l := range plan.Set {
		labels[l] = "true"
	}
	for _, l := range plan.Remove {
		labels[l] = nil
	}
	var owned any
	if plan.Owned != "" {
		owned = plan.Owned
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      labels,
		"annotations": map[string]any{builder.AnnotationNodeLabels: owned},
	}})
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Patch(ctx, n, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(builder.FieldManager)); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("label node %s: %w", n.Name, err)
	}
	log.FromContext(ctx).V(1).Info("labelled GPU node", "set", plan.Set, "removed", plan.Remove)
	return ctrl.Result{}, nil
}
