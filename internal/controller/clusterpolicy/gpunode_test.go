// SPDX-License-Identifier: Apache-2.0

package clusterpolicy

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/install"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

// wantLabels are the labels trainops puts on a GPU node for cp.
func wantLabels(cp *gpuv1alpha1.ClusterPolicy) []string {
	out := []string{builder.LabelGPUPresent}
	for _, c := range builder.Components(cp) {
		out = append(out, builder.DeployLabel(c))
	}
	return out
}

// nodesLabelled: the simulated GPU nodes carry only Node Feature
// Discovery's label; trainops adds nvidia.com/gpu.present and a deploy
// label per component, to them and to a node with the NFD label and no
// GPU capacity yet, and to no CPU node. Every stack pod landed on exactly
// the GPU nodes.
func nodesLabelled(t *testing.T, cp *gpuv1alpha1.ClusterPolicy) {
	ctx := context.Background()
	// A node NFD found a GPU on, whose device plugin has not advertised
	// it yet. Its taint keeps the stack's pods off it (no kwok node runs
	// them), so the DaemonSets' counts stay those of the GPU nodes.
	nfdOnly := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "nfd-only", Labels: map[string]string{testenv.GPUNodeLabel: "true"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "trainops.test/not-simulated", Effect: corev1.TaintEffectNoSchedule}}}}
	if err := k8s.Create(ctx, nfdOnly); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), nfdOnly) })
	want := wantLabels(getPolicy(t, cp.Name))
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, name := range append(append([]string{}, env.Nodes...), nfdOnly.Name) {
			n := testenv.Node(t, k8s, name)
			gpu := n.Labels[testenv.GPUNodeLabel] == "true"
			for _, l := range want {
				if got := n.Labels[l]; gpu && got != "true" || !gpu && got != "" {
					return fmt.Errorf("node %s (GPU %v): %s=%q", name, gpu, l, got)
				}
			}
			if owned := n.Annotations[builder.AnnotationNodeLabels]; gpu && !sets.New(strings.Split(owned, ",")...).HasAll(want...) {
				return fmt.Errorf("node %s records %q as trainops's labels", name, owned)
			}
		}
		return nil
	})
	// Every component's pods run on every GPU node, and only there.
	running := stackPods(t, "gpu-operator")
	for ds, want := range stackDaemonSets {
		if running[ds] != want {
			t.Errorf("%s: %d ready pods, want one per GPU node it serves (%d)", ds, running[ds], want)
		}
	}
}

// optOut: an admin's nvidia.com/gpu.deploy.dcgm-exporter=false keeps the
// exporter off that node, and trainops leaves the label as it is.
func optOut(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, ns string) {
	ctx := context.Background()
	node := env.GPUNodeNames()[0]
	label := builder.DeployLabel(builder.ComponentDCGMExporter)
	setLabel := func(v *string) {
		n := testenv.Node(t, k8s, node)
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, label)
		if v != nil {
			patch = fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, label, *v)
		}
		if err := k8s.Patch(ctx, n, client.RawPatch("application/merge-patch+json", []byte(patch)), client.FieldOwner("admin")); err != nil {
			t.Fatal(err)
		}
	}
	setLabel(ptr.To("false"))
	testenv.Eventually(t, 30*time.Second, func() error {
		ds := &appsv1.DaemonSet{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.DCGMExporterDaemonSet}, ds); err != nil {
			return err
		}
		if ds.Status.DesiredNumberScheduled != 1 || ds.Status.NumberReady != 1 {
			return fmt.Errorf("exporter desired %d ready %d, want 1 and 1", ds.Status.DesiredNumberScheduled, ds.Status.NumberReady)
		}
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": builder.DCGMExporterDaemonSet}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == node && p.DeletionTimestamp.IsZero() {
				return fmt.Errorf("exporter pod %s still on %s", p.Name, node)
			}
		}
		return nil
	})
	// The labeller saw the change (any label change reconciles the node)
	// and left the admin's value.
	n := testenv.Node(t, k8s, node)
	if n.Labels[label] != "false" || strings.Contains(n.Annotations[builder.AnnotationNodeLabels], label) {
		t.Errorf("opt-out label %q, trainops's labels %q", n.Labels[label], n.Annotations[builder.AnnotationNodeLabels])
	}
	if n.Labels[builder.DeployLabel(builder.ComponentDevicePlugin)] != "true" {
		t.Error("the opt-out of one component took another off the node")
	}
	// Opting back in: the admin removes the label, trainops adds its own.
	setLabel(nil)
	testenv.Eventually(t, 30*time.Second, func() error {
		if v := testenv.Node(t, k8s, node).Labels[label]; v != "true" {
			return fmt.Errorf("%s=%q after the opt-out was removed", label, v)
		}
		return nil
	})
	waitState(t, cp.Name, gpuv1alpha1.StateReady)
}

// foreignExporter is a DaemonSet of the exporter's name as another
// controller would make it, its pods labelled app.
func foreignExporter(ns, app string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: builder.DCGMExporterDaemonSet, Labels: map[string]string{"app": app}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"trainops.test/nowhere": "true"},
					Containers:   []corev1.Container{{Name: "nvidia-dcgm-exporter", Image: "nvcr.io/nvidia/k8s/dcgm-exporter:theirs"}},
				},
			},
		},
	}
}

// foreignDaemonSet: a DaemonSet of the exporter's name, applied by another
// field manager (as the GPU Operator would), stays unchanged through
// several reconciles; the ClusterPolicy says Conflict, naming it and its
// manager, with one Event; once it is gone the stack is whole again.
func foreignDaemonSet(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, ns string) {
	ctx := context.Background()
	foreign := foreignExporter(ns, "theirs")
	if err := k8s.Patch(ctx, foreign, client.Apply, client.FieldOwner("gpu-operator"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	before := fmt.Sprintf("generation %d labels %v image %s", foreign.Generation, foreign.Labels, foreign.Spec.Template.Spec.Containers[0].Image)
	updatePolicy(t, cp.Name, func(cur *gpuv1alpha1.ClusterPolicy) { cur.Spec.DCGM.Exporter.Enabled = ptr.To(true) })
	var got *gpuv1alpha1.ClusterPolicy
	testenv.Eventually(t, 30*time.Second, func() error {
		got = getPolicy(t, cp.Name)
		if conditions.GetReason(got, status.ReadyCondition) != children.ReasonConflict {
			return fmt.Errorf("Ready reason %q: %s", conditions.GetReason(got, status.ReadyCondition), conditions.GetMessage(got, status.ReadyCondition))
		}
		return nil
	})
	msg := conditions.GetMessage(got, status.ReadyCondition)
	for _, want := range []string{"DaemonSet " + ns + "/" + builder.DCGMExporterDaemonSet, "managed by gpu-operator"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Ready message %q lacks %q", msg, want)
		}
	}
	// Several reconciles later (by hand, from a cache that holds the
	// ClusterPolicy as it is; the foreign DaemonSet, which wears none of
	// trainops's labels, is read live), still untouched.
	testenv.CacheCaughtUp(t, mgr.GetClient(), k8s, got)
	r := &Reconciler{Deps: children.Deps{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("test"), Config: testCfg}}
	if err := r.SetupDiscovery(mgr.GetConfig()); err != nil {
		t.Fatal(err)
	}
	reconciled := 0
	testenv.AfterProof(t, 30*time.Second, func() error {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cp)}); err != nil {
			return err
		}
		if reconciled++; reconciled < 3 {
			return fmt.Errorf("reconciled %d times, want 3", reconciled)
		}
		return nil
	}, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(foreign), foreign); err != nil {
			return err
		}
		if now := fmt.Sprintf("generation %d labels %v image %s", foreign.Generation, foreign.Labels, foreign.Spec.Template.Spec.Containers[0].Image); now != before {
			return fmt.Errorf("the foreign DaemonSet changed: %s, was %s", now, before)
		}
		for _, m := range foreign.ManagedFields {
			if m.Manager == builder.FieldManager {
				return fmt.Errorf("trainops wrote the foreign DaemonSet: %+v", m)
			}
		}
		return nil
	})
	if n := testenv.EventReasons(t, k8s, "", cp.Name)[children.ReasonConflict]; n == "" {
		t.Error("no Conflict Event")
	}
	if err := k8s.Delete(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		ds := &appsv1.DaemonSet{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(foreign), ds)
		if err != nil {
			return err
		}
		if metav1.GetControllerOf(ds) == nil || metav1.GetControllerOf(ds).UID != cp.UID {
			return fmt.Errorf("exporter not trainops's yet")
		}
		return nil
	})
	waitState(t, cp.Name, gpuv1alpha1.StateReady)
}

// labelsGoWithThePolicy: deleting the ClusterPolicy removes the labels
// trainops added, and only those.
func labelsGoWithThePolicy(t *testing.T, cp *gpuv1alpha1.ClusterPolicy) {
	ctx := context.Background()
	want := wantLabels(getPolicy(t, cp.Name))
	if err := k8s.Delete(ctx, cp); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(cp), &gpuv1alpha1.ClusterPolicy{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("ClusterPolicy not gone yet (err %v)", err)
		}
		for _, name := range env.Nodes {
			n := testenv.Node(t, k8s, name)
			for _, l := range want {
				if v, ok := n.Labels[l]; ok {
					return fmt.Errorf("node %s keeps %s=%s", name, l, v)
				}
			}
			if a, ok := n.Annotations[builder.AnnotationNodeLabels]; ok {
				return fmt.Errorf("node %s keeps the annotation %q", name, a)
			}
			if strings.HasPrefix(name, "gpu-") && (n.Labels[testenv.GPUNodeLabel] != "true" || n.Labels["gpu"] != "true") {
				return fmt.Errorf("node %s lost labels trainops did not add: %v", name, n.Labels)
			}
		}
		return nil
	})
}

// gpuOperatorPresent: with clusterpolicies.nvidia.com served (the GPU
// Operator installed), the ClusterPolicy applies nothing and says why,
// until it names nodes of its own (spec.nodeSelector) or the operator
// goes.
func gpuOperatorPresent(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, ns string) {
	path := filepath.Join("..", "..", "..", "testdata", "crds", "clusterpolicies.nvidia.com.yaml")
	testenv.InstallYAML(t, k8s, path)
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	crd.SetName("clusterpolicies.nvidia.com")
	removed := false
	remove := func() {
		if !removed {
			removed = true
			_ = k8s.Delete(context.Background(), crd)
		}
	}
	t.Cleanup(remove)
	testenv.Eventually(t, 30*time.Second, func() error {
		_, err := discovery.NewDiscoveryClientForConfigOrDie(env.Config).ServerResourcesForGroupVersion("nvidia.com/v1")
		return err
	})
	// A change the stack would roll out, were it applied.
	before := daemonSetGeneration(t, ns, builder.DevicePluginDaemonSet)
	// Without spec.nodeSelector the stack would run on the operator's
	// nodes too.
	updatePolicy(t, cp.Name, func(cur *gpuv1alpha1.ClusterPolicy) {
		cur.Spec.DevicePlugin.Config.Sharing.TimeSlicing.Resources[0].Replicas = 6
		cur.Spec.NodeSelector = nil
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		got := getPolicy(t, cp.Name)
		if conditions.GetReason(got, status.ReadyCondition) != children.ReasonConflict || !strings.Contains(conditions.GetMessage(got, status.ReadyCondition), "NVIDIA GPU Operator is installed") {
			return fmt.Errorf("Ready %s: %s", conditions.GetReason(got, status.ReadyCondition), conditions.GetMessage(got, status.ReadyCondition))
		}
		return nil
	})
	if after := daemonSetGeneration(t, ns, builder.DevicePluginDaemonSet); after != before {
		t.Errorf("the device plugin changed (generation %d -> %d) beside the GPU Operator", before, after)
	}
	remove()
	testenv.Eventually(t, 60*time.Second, func() error {
		if daemonSetGeneration(t, ns, builder.DevicePluginDaemonSet) == before {
			return fmt.Errorf("the change is not applied once the GPU Operator is gone")
		}
		return nil
	})
	waitState(t, cp.Name, gpuv1alpha1.StateReady)
}

// updatePolicy changes the ClusterPolicy name with change, retrying on
// conflicts with the reconciler's status writes.
func updatePolicy(t *testing.T, name string, change func(*gpuv1alpha1.ClusterPolicy)) {
	t.Helper()
	testenv.Update(t, k8s, &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}, change)
}

func daemonSetGeneration(t *testing.T, ns, name string) int64 {
	t.Helper()
	ds := &appsv1.DaemonSet{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ds); err != nil {
		t.Fatal(err)
	}
	return ds.Generation
}

// takeOver: with takeOverExisting, a foreign DaemonSet of the stack's
// name becomes trainops's.
func takeOver(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, ns string) {
	ctx := context.Background()
	// The GPU Operator's exporter selects its pods as trainops's does (a
	// DaemonSet's selector cannot change).
	foreign := foreignExporter(ns, builder.DCGMExporterDaemonSet)
	updatePolicy(t, cp.Name, func(cur *gpuv1alpha1.ClusterPolicy) { cur.Spec.DCGM.Exporter.Enabled = ptr.To(false) })
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(foreign), &appsv1.DaemonSet{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("exporter not gone yet (err %v)", err)
		}
		return nil
	})
	if err := k8s.Patch(ctx, foreign, client.Apply, client.FieldOwner("gpu-operator"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	updatePolicy(t, cp.Name, func(cur *gpuv1alpha1.ClusterPolicy) {
		cur.Spec.DCGM.Exporter.Enabled = ptr.To(true)
		cur.Spec.TakeOverExisting = true
	})
	testenv.Eventually(t, 60*time.Second, func() error {
		ds := &appsv1.DaemonSet{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(foreign), ds); err != nil {
			return err
		}
		if ref := metav1.GetControllerOf(ds); ref == nil || ref.UID != cp.UID || ds.Spec.Template.Spec.Containers[0].Image != getPolicy(t, cp.Name).Spec.DCGM.Exporter.Image {
			return fmt.Errorf("not taken over: owner %v, image %s", metav1.GetControllerOf(ds), ds.Spec.Template.Spec.Containers[0].Image)
		}
		return nil
	})
	updatePolicy(t, cp.Name, func(cur *gpuv1alpha1.ClusterPolicy) { cur.Spec.TakeOverExisting = false })
}

// perNodeConfig: a node labelled nvidia.com/device-plugin.config=<name>
// gets the plugin of that configuration, the other GPU node the default;
// without the configuration, its DaemonSet goes.
func perNodeConfig(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, ns string) {
	ctx := context.Background()
	node := env.GPUNodeNames()[0]
	n := testenv.Node(t, k8s, node)
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"shared-8"}}}`, builder.LabelDevicePluginConfig)
	if err := k8s.Patch(ctx, n, client.RawPatch("application/merge-patch+json", []byte(patch)), client.FieldOwner("admin")); err != nil {
		t.Fatal(err)
	}
	updatePolicy(t, cp.Name, func(cur *gpuv1alpha1.ClusterPolicy) {
		cur.Spec.DevicePlugin.Config.PerNode = []gpuv1alpha1.NamedDevicePluginConfig{{Name: "shared-8", Sharing: gpuv1alpha1.SharingSpec{
			TimeSlicing: &gpuv1alpha1.TimeSlicingSpec{Resources: []gpuv1alpha1.TimeSlicingResource{{Name: "nvidia.com/gpu", Replicas: 8}}}}}}
	})
	named := builder.DevicePluginDaemonSetFor("shared-8")
	testenv.Eventually(t, 60*time.Second, func() error {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		on := map[string]string{}
		for _, p := range pods.Items {
			if app := p.Labels["app"]; (app == named || app == builder.DevicePluginDaemonSet) && p.DeletionTimestamp.IsZero() && p.Spec.NodeName != "" {
				on[app+"@"+p.Spec.NodeName] = string(p.Status.Phase)
			}
		}
		if len(on) != 2 || on[named+"@"+node] == "" {
			return fmt.Errorf("device plugin pods %v, want %s on %s and the default on the other GPU node", on, named, node)
		}
		return nil
	})
	got := waitState(t, cp.Name, gpuv1alpha1.StateReady)
	counted := false
	for _, c := range got.Status.Components {
		counted = counted || c.Name == named && c.Desired == 1 && c.Ready == 1
	}
	if !counted {
		t.Errorf("components %+v do not count %s", got.Status.Components, named)
	}
	updatePolicy(t, cp.Name, func(cur *gpuv1alpha1.ClusterPolicy) { cur.Spec.DevicePlugin.Config.PerNode = nil })
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: named}, &appsv1.DaemonSet{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s still there (err %v)", named, err)
		}
		return nil
	})
	patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, builder.LabelDevicePluginConfig)
	if err := k8s.Patch(ctx, testenv.Node(t, k8s, node), client.RawPatch("application/merge-patch+json", []byte(patch)), client.FieldOwner("admin")); err != nil {
		t.Fatal(err)
	}
	waitState(t, cp.Name, gpuv1alpha1.StateReady)
}

// migManager: turning the MIG manager on brings its RBAC and layouts with
// its DaemonSet, on every GPU node; turning it off takes them away.
func migManager(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, ns string) {
	ctx := context.Background()
	installed := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: builder.MIGManagerClusterRole}}
	if err := k8s.Delete(ctx, installed); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	var sharing *gpuv1alpha1.DevicePluginConfig
	updatePolicy(t, cp.Name, func(cur *gpuv1alpha1.ClusterPolicy) {
		sharing = cur.Spec.DevicePlugin.Config
		cur.Spec.DevicePlugin.Config = nil // MIG excludes time-slicing
		cur.Spec.MIGManager.Enabled = true
		cur.Spec.MIGManager.Profiles = []gpuv1alpha1.MIGProfile{{Name: "all-3g.40gb", Devices: map[string]int32{"3g.40gb": 2}}}
	})
	// Without the installed ClusterRole, the ClusterPolicy says what is
	// missing, and the MIG manager is not deployed.
	testenv.Eventually(t, 30*time.Second, func() error {
		got := &gpuv1alpha1.ClusterPolicy{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: cp.Name}, got); err != nil {
			return err
		}
		if msg := conditions.GetMessage(got, status.ReadyCondition); got.Status.State != gpuv1alpha1.StateNotReady || !strings.Contains(msg, builder.MIGManagerClusterRole) || !strings.Contains(msg, "mig_manager_role.yaml") {
			return fmt.Errorf("state %s, Ready message %q", got.Status.State, msg)
		}
		return nil
	})
	for _, o := range []client.Object{
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: builder.MIGManagerDaemonSet}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: builder.MIGManagerRBAC}},
	} {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s exists without the ClusterRole it needs (err %v)", o, o.GetName(), err)
		}
	}
	installMIGManagerRole(t)
	rbac := []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: builder.MIGManagerRBAC}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: builder.MIGManagerRBAC}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: builder.MIGManagerRBAC}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: builder.MIGPartedConfigMap}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: builder.GPUClientsConfigMap}},
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		for _, o := range rbac {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return fmt.Errorf("%T %s: %v", o, o.GetName(), err)
			}
		}
		if running := stackPods(t, ns)[builder.MIGManagerDaemonSet]; running != 2 {
			return fmt.Errorf("%d MIG manager pods ready, want 2", running)
		}
		return nil
	})
	if crb := rbac[0].(*rbacv1.ClusterRoleBinding); crb.RoleRef.Name != builder.MIGManagerClusterRole {
		t.Errorf("ClusterRoleBinding binds %s, want %s", crb.RoleRef.Name, builder.MIGManagerClusterRole)
	}
	if cm := rbac[3].(*corev1.ConfigMap); !strings.Contains(cm.Data["config.yaml"], "all-3g.40gb") {
		t.Errorf("layouts lack the profile:\n%s", cm.Data["config.yaml"])
	}
	updatePolicy(t, cp.Name, func(cur *gpuv1alpha1.ClusterPolicy) {
		cur.Spec.MIGManager.Enabled = false
		cur.Spec.MIGManager.Profiles = nil
		cur.Spec.DevicePlugin.Config = sharing
	})
	testenv.Eventually(t, 60*time.Second, func() error {
		for _, o := range rbac {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (err %v)", o, o.GetName(), err)
			}
		}
		return nil
	})
	waitState(t, cp.Name, gpuv1alpha1.StateReady)
}

// installMIGManagerRole creates the ClusterRole trainops's installation
// holds for the MIG manager, and removes it when the test ends.
func installMIGManagerRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	role, err := install.ClusterRole(builder.MIGManagerClusterRole)
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(context.Background(), role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), role) })
	return role
}
