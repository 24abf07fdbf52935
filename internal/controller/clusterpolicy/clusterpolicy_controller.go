// SPDX-License-Identifier: Apache-2.0

// Package clusterpolicy reconciles the active ClusterPolicy into the GPU
// stack's DaemonSets (driver, toolkit, device plugin, DCGM exporter, MIG
// manager, validator) and labels the GPU nodes they run on.
package clusterpolicy

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
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
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/controller/gpustack"
	"github.com/trainops/trainops/internal/status"
)

// Reasons of the ClusterPolicy's conditions.
const (
	ReasonIgnored            = "Ignored"
	ReasonComponentsNotReady = "ComponentsNotReady"
	// ReasonNodeOSUnknown: GPU nodes lack the OS labels their driver
	// image is chosen by.
	ReasonNodeOSUnknown = "NodeOSUnknown"
)

// ServiceMonitorCondition says whether the DCGM exporter's ServiceMonitor
// exists as asked.
const (
	ServiceMonitorCondition        = "ServiceMonitorReady"
	ReasonServiceMonitorCRDMissing = "ServiceMonitorCRDMissing"
)

// Reconciler runs the active ClusterPolicy as the GPU node
// stack: a RuntimeClass and one DaemonSet per enabled component.
type Reconciler struct {
	children.Deps
	// Discovery finds the API groups the stack's optional children need
	// (nil: made from the manager's config).
	Discovery discovery.DiscoveryInterface
}

// +kubebuilder:rbac:groups=gpu.trainops.dev,resources=clusterpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=gpu.trainops.dev,resources=clusterpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps;services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=node.k8s.io,resources=runtimeclasses,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=get;bind,resourceNames=trainops-mig-manager

// SetupWithManager registers the reconciler. Any ClusterPolicy change
// re-reconciles all of them: which one is active depends on the others.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := r.SetupDiscovery(mgr.GetConfig()); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&gpuv1alpha1.ClusterPolicy{}).
		Owns(&appsv1.DaemonSet{}, children.ChildEvents).
		Owns(&corev1.ConfigMap{}, children.ChildEvents).
		Owns(&corev1.Service{}, children.ChildEvents, ctrlbuilder.OnlyMetadata).
		Owns(&corev1.ServiceAccount{}, children.ChildEvents).
		Owns(&nodev1.RuntimeClass{}, children.ChildEvents).
		Watches(&gpuv1alpha1.ClusterPolicy{}, handler.EnqueueRequestsFromMapFunc(r.allPolicies)).
		// A GPU node's OS decides which driver DaemonSets there are.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allPolicies), ctrlbuilder.WithPredicates(nodeOSChanged))
	// A ClusterPolicy a sync held is queued once it is done.
	return r.WatchReleases(b, &gpuv1alpha1.ClusterPolicyList{}, children.Unreconciled, nil).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1, RateLimiter: status.ErrorBackoff[reconcile.Request]()}).
		Named("clusterpolicy").
		Complete(r)
}

// SetupDiscovery gives the reconciler an uncached discovery client, so a
// ServiceMonitor CRD installed later is noticed.
func (r *Reconciler) SetupDiscovery(cfg *rest.Config) error {
	if r.Discovery != nil {
		return nil
	}
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	r.Discovery = d
	return nil
}

// nodeOSChanged passes node events that can change the driver
// DaemonSets: a node created or deleted, or its GPU or OS labels changed.
var nodeOSChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()
		for _, k := range []string{builder.LabelGPUPresent, builder.LabelOSReleaseID, builder.LabelOSVersionID} {
			if o[k] != n[k] {
				return true
			}
		}
		return false
	},
}

func (r *Reconciler) allPolicies(ctx context.Context, _ client.Object) []reconcile.Request {
	var list gpuv1alpha1.ClusterPolicyList
	if err := r.List(ctx, &list); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, cp := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&cp)})
	}
	return out
}

// Reconcile brings one ClusterPolicy's stack and status up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cp := &gpuv1alpha1.ClusterPolicy{}
	if res, ok, err := r.Begin(ctx, req, cp); !ok {
		return res, err
	}
	before := cp.Status.State
	reconcile := func(func(context.Context) error) (ctrl.Result, error) { return r.reconcile(ctx, cp) }
	return gpustack.NodesOf(r.Deps).PolicyStatus().Around(ctx, cp, reconcile, func() {
		if before == cp.Status.State {
			return
		}
		log.FromContext(ctx).Info("Reconcile: ClusterPolicy state changed", "from", before, "to", cp.Status.State, "message", conditions.GetMessage(cp, status.ReadyCondition))
		typ := corev1.EventTypeNormal
		if cp.Status.State == gpuv1alpha1.StateNotReady && before == gpuv1alpha1.StateReady {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(cp, nil, typ, "State"+stateWord(cp.Status.State), "Reconcile", "%s", conditions.GetMessage(cp, status.ReadyCondition))
	})
}

func stateWord(s gpuv1alpha1.ClusterPolicyState) string {
	switch s {
	case gpuv1alpha1.StateReady:
		return "Ready"
	case gpuv1alpha1.StateIgnored:
		return "Ignored"
	}
	return "NotReady"
}

func (r *Reconciler) reconcile(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy) (ctrl.Result, error) {
	activeCP, err := gpustack.ActivePolicy(ctx, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	active := ""
	if activeCP != nil {
		active = activeCP.Name
	}
	// The remediation and upgrade reconcilers write these while they are on.
	if active != cp.Name || !cp.Spec.Remediation.Enabled {
		conditions.Delete(cp, gpustack.GPUNodesHealthyCondition)
	}
	if active != cp.Name || !cp.Spec.Driver.UpgradePolicy.AutoUpgrade {
		conditions.Delete(cp, gpustack.DriverUpgradedCondition)
	}
	if active != cp.Name {
		cp.Status.State = gpuv1alpha1.StateIgnored
		cp.Status.Components = nil
		conditions.Delete(cp, ServiceMonitorCondition)
		status.MarkDone(cp, false, ReasonIgnored, "ClusterPolicy %s is active: a cluster has one GPU stack, and this ClusterPolicy is ignored; delete one of them", active)
		return ctrl.Result{}, nil
	}
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes, client.MatchingLabels{builder.LabelGPUPresent: "true"}); err != nil {
		return r.retry(ctx, cp, err)
	}
	gpuNodes := builder.GPUNodesOf(cp, nodes.Items)
	built := builder.ForClusterPolicy(cp, gpuNodes)
	cp.Status.Namespace = built.Namespace.Name
	if operator, err := r.gpuOperatorServed(); err != nil {
		return r.retry(ctx, cp, err)
	} else if operator && len(cp.Spec.NodeSelector) == 0 && !cp.Spec.TakeOverExisting {
		return r.retry(ctx, cp, &children.ConflictError{Msg: "the NVIDIA GPU Operator is installed (clusterpolicies.nvidia.com is served) and runs its own GPU stack: " +
			"trainops applies nothing, so the two never run a driver on the same node. Set spec.nodeSelector to nodes the GPU Operator does not manage, or remove one of them"})
	}
	if err := r.migManagerRoleInstalled(ctx, cp); err != nil {
		return r.retry(ctx, cp, err)
	}
	if res, err := r.reconcileChildren(ctx, cp, built); err != nil || !res.IsZero() {
		return res, err
	}
	smPresent, err := r.serviceMonitorCRDPresent()
	if err != nil {
		return r.retry(ctx, cp, err)
	}
	smOK, err := r.reconcileServiceMonitor(ctx, cp, built, smPresent)
	if err != nil {
		return r.retry(ctx, cp, err)
	}
	if err := r.pruneChildren(ctx, cp, built, smPresent); err != nil {
		return r.retry(ctx, cp, err)
	}
	if err := r.reconcileStatus(ctx, cp, built); err != nil {
		return ctrl.Result{}, err
	}
	if missing := gpuNodes.WithoutOS; len(missing) > 0 && slices.Contains(builder.Components(cp), builder.ComponentDriver) {
		// The node watch reconciles again once the labels come.
		cp.Status.State = gpuv1alpha1.StateNotReady
		status.MarkInProgress(cp, ReasonNodeOSUnknown, "no driver for GPU nodes %s: they lack Node Feature Discovery's labels %s and %s, by which the driver image is chosen (deploy NFD, or label the nodes with their /etc/os-release ID and VERSION_ID)",
			children.FirstNames(missing), builder.LabelOSReleaseID, builder.LabelOSVersionID)
		return ctrl.Result{}, nil
	}
	if !smOK {
		cp.Status.State = gpuv1alpha1.StateNotReady
		status.MarkInProgress(cp, ReasonServiceMonitorCRDMissing, "DaemonSets deployed, but the DCGM exporter's ServiceMonitor was not created: the monitoring.coreos.com/v1 ServiceMonitor CRD is not installed (install Prometheus Operator, or set dcgm.exporter.serviceMonitor.enabled=false)")
		return ctrl.Result{RequeueAfter: r.Config.RetryDelay}, nil
	}
	return ctrl.Result{}, nil
}

func (r *Reconciler) retry(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, err error) (ctrl.Result, error) {
	if !children.IsGone(err) {
		log.FromContext(ctx).Error(err, "reconcile")
		cp.Status.State = gpuv1alpha1.StateNotReady
	}
	return children.Failed(r.Recorder, cp, err, r.Config.RetryDelay)
}

// reconcileChildren creates the namespace if missing, then applies the
// RuntimeClass, ConfigMap, Service, ServiceAccounts and DaemonSets.
func (r *Reconciler) reconcileChildren(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, built builder.ClusterPolicyChildren) (ctrl.Result, error) {
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, client.ObjectKey{Name: built.Namespace.Name}, ns); apierrors.IsNotFound(err) {
		// Created, never owned: the namespace may hold more than the GPU
		// stack, and must not go when the ClusterPolicy does.
		if err := r.Create(ctx, built.Namespace); err != nil && !apierrors.IsAlreadyExists(err) {
			return r.retry(ctx, cp, fmt.Errorf("create namespace %s: %w", built.Namespace.Name, err))
		}
	} else if err != nil {
		return r.retry(ctx, cp, err)
	}
	a := r.Applier().ReportingTo(r.Recorder, cp)
	a.TakeOver = cp.Spec.TakeOverExisting
	for _, o := range built.Objects {
		res, _, err := a.Apply(ctx, o, children.MetadataAnswer)
		if err != nil {
			return r.retry(ctx, cp, err)
		}
		if res == children.Configured {
			if _, ok := o.(*appsv1.DaemonSet); ok {
				r.Recorder.Eventf(cp, nil, corev1.EventTypeNormal, "RollingOut", "Update", "updated DaemonSet %s/%s", o.GetNamespace(), o.GetName())
			}
		}
	}
	return ctrl.Result{}, nil
}

// reconcileServiceMonitor applies the ServiceMonitor when asked for and its
// CRD exists; it reports false when asked for but impossible.
func (r *Reconciler) reconcileServiceMonitor(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, built builder.ClusterPolicyChildren, crdPresent bool) (bool, error) {
	if built.ServiceMonitor == nil {
		conditions.Delete(cp, ServiceMonitorCondition)
		return true, nil
	}
	if !crdPresent {
		conditions.MarkFalse(cp, ServiceMonitorCondition, ReasonServiceMonitorCRDMissing, "the monitoring.coreos.com/v1 ServiceMonitor CRD is not installed: install Prometheus Operator, or set dcgm.exporter.serviceMonitor.enabled=false")
		return false, nil
	}
	a := r.Applier().ReportingTo(r.Recorder, cp)
	a.TakeOver = cp.Spec.TakeOverExisting
	if _, _, err := a.Apply(ctx, built.ServiceMonitor, children.MetadataAnswer); err != nil {
		return false, err
	}
	conditions.MarkTrue(cp, ServiceMonitorCondition, children.ReasonAvailable, "ServiceMonitor %s/%s scrapes the DCGM exporter every %s", built.ServiceMonitor.GetNamespace(), built.ServiceMonitor.GetName(), cp.Spec.DCGM.Exporter.ServiceMonitor.Interval)
	return true, nil
}

// migManagerRoleInstalled checks, when the MIG manager is on, that the
// ClusterRole its binding names was installed with trainops: without it
// the MIG manager could not read its node, and the ClusterPolicy says so
// instead of deploying a DaemonSet that fails on every GPU node.
func (r *Reconciler) migManagerRoleInstalled(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy) error {
	if !cp.Spec.MIGManager.Enabled {
		return nil
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	role := &metav1.PartialObjectMetadata{}
	role.SetGroupVersionKind(rbacv1.SchemeGroupVersion.WithKind("ClusterRole"))
	err := reader.Get(ctx, client.ObjectKey{Name: builder.MIGManagerClusterRole}, role)
	if apierrors.IsNotFound(err) {
		return &children.WaitError{Reason: status.ReasonPrerequisiteMissing, Msg: fmt.Sprintf("the MIG manager needs the ClusterRole %s, which is installed with trainops (config/rbac/mig_manager_role.yaml, or `trainops install`): apply it, or set migManager.enabled=false", builder.MIGManagerClusterRole)}
	}
	if err != nil {
		return fmt.Errorf("read ClusterRole %s: %w", builder.MIGManagerClusterRole, err)
	}
	return nil
}

// gpuOperatorServed reports whether the NVIDIA GPU Operator's
// ClusterPolicy (clusterpolicies.nvidia.com) is served: the operator is
// installed.
func (r *Reconciler) gpuOperatorServed() (bool, error) {
	return r.served(schema.GroupVersionKind{Group: "nvidia.com", Version: "v1", Kind: "ClusterPolicy"})
}

func (r *Reconciler) serviceMonitorCRDPresent() (bool, error) {
	return r.served(builder.ServiceMonitorGVK)
}

// served reports whether the API server serves gvk.
func (r *Reconciler) served(gvk schema.GroupVersionKind) (bool, error) {
	gv := gvk.GroupVersion()
	list, err := r.Discovery.ServerResourcesForGroupVersion(gv.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", gv, err)
	}
	for _, res := range list.APIResources {
		if res.Kind == gvk.Kind {
			return true, nil
		}
	}
	return false, nil
}

// pruneChildren deletes children of this ClusterPolicy that are no longer
// desired: a component turned off, or a namespace changed.
func (r *Reconciler) pruneChildren(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, built builder.ClusterPolicyChildren, smPresent bool) error {
	lists := map[string]client.ObjectList{
		"DaemonSet":      &appsv1.DaemonSetList{},
		"ConfigMap":      &corev1.ConfigMapList{},
		"Service":        children.MetadataList(corev1.SchemeGroupVersion.WithKind("ServiceList")),
		"ServiceAccount": &corev1.ServiceAccountList{},
		"RuntimeClass":   &nodev1.RuntimeClassList{},
		// The MIG manager's.
		"ClusterRoleBinding": &rbacv1.ClusterRoleBindingList{},
		"Role":               &rbacv1.RoleList{},
		"RoleBinding":        &rbacv1.RoleBindingList{},
	}
	if smPresent {
		sm := &unstructured.UnstructuredList{}
		sm.SetGroupVersionKind(builder.ServiceMonitorGVK.GroupVersion().WithKind(builder.ServiceMonitorGVK.Kind + "List"))
		lists[builder.ServiceMonitorGVK.Kind] = sm
	}
	return children.Pruner{Client: r.Client, Recorder: r.Recorder}.Prune(ctx, cp, lists, children.WantKeys(built.AllObjects()), "no longer in the ClusterPolicy", client.MatchingLabels{builder.LabelClusterPolicy: cp.Name})
}

// reconcileStatus counts desired and ready pods per DaemonSet.
func (r *Reconciler) reconcileStatus(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, built builder.ClusterPolicyChildren) error {
	var comps []gpuv1alpha1.ComponentStatus
	var notReady []string
	for _, name := range built.DaemonSets {
		ds := &appsv1.DaemonSet{}
		err := r.Get(ctx, client.ObjectKey{Namespace: built.Namespace.Name, Name: name}, ds)
		if apierrors.IsNotFound(err) {
			comps = append(comps, gpuv1alpha1.ComponentStatus{Name: name})
			notReady = append(notReady, name+" (not created yet)")
			continue
		}
		if err != nil {
			return err
		}
		st := ds.Status
		comps = append(comps, gpuv1alpha1.ComponentStatus{Name: name, Desired: st.DesiredNumberScheduled, Ready: st.NumberReady})
		if !daemonSetReady(ds) {
			notReady = append(notReady, fmt.Sprintf("%s (%d/%d ready)", name, st.NumberReady, st.DesiredNumberScheduled))
		}
	}
	cp.Status.Components = comps
	if len(notReady) > 0 {
		cp.Status.State = gpuv1alpha1.StateNotReady
		status.MarkInProgress(cp, ReasonComponentsNotReady, "waiting for %s", strings.Join(notReady, ", "))
		return nil
	}
	cp.Status.State = gpuv1alpha1.StateReady
	nodes := int32(0)
	if len(comps) > 0 {
		nodes = comps[0].Desired
	}
	status.MarkDone(cp, true, children.ReasonAvailable, "GPU stack ready: %d components on %d GPU nodes", len(comps), nodes)
	return nil
}

// daemonSetReady is true when every desired pod runs the current template
// and is ready. The driver's OnDelete pods update only when deleted, so
// only readiness is asked of them.
func daemonSetReady(ds *appsv1.DaemonSet) bool {
	st := ds.Status
	if st.ObservedGeneration < ds.Generation || st.NumberReady != st.DesiredNumberScheduled {
		return false
	}
	if ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
		return true
	}
	return st.UpdatedNumberScheduled == st.DesiredNumberScheduled
}
