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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

func getPolicy(t *testing.T, name string) *gpuv1alpha1.ClusterPolicy {
	t.Helper()
	cp := &gpuv1alpha1.ClusterPolicy{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

// stackPods counts the GPU stack's running pods per DaemonSet, failing the
// test for any pod on a node without GPUs.
func stackPods(t *testing.T, ns string) map[string]int32 {
	t.Helper()
	ctx := context.Background()
	var list corev1.PodList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, p := range list.Items {
		if p.Spec.NodeName == "" || !p.DeletionTimestamp.IsZero() {
			continue
		}
		n := &corev1.Node{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, n); err != nil {
			t.Fatal(err)
		}
		if n.Labels["nvidia.com/gpu.present"] != "true" {
			t.Errorf("pod %s of the GPU stack runs on %s, which has no GPUs", p.Name, n.Name)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				out[p.Labels["app"]]++
			}
		}
	}
	return out
}

// stackDaemonSets are the DaemonSets of the seed's ClusterPolicy on the
// suite's GPU nodes, each with the number of GPU nodes it serves: one
// driver DaemonSet per OS of the simulated GPU nodes (node i runs
// testenv.SimulatedOS[i]), the other components on all of them.
var stackDaemonSets = func() map[string]int32 {
	out := map[string]int32{}
	for _, name := range []string{builder.ToolkitDaemonSet, builder.ValidatorDaemonSet, builder.DevicePluginDaemonSet, builder.GFDDaemonSet, builder.DCGMExporterDaemonSet} {
		out[name] = suiteGPUNodes
	}
	for i := 0; i < suiteGPUNodes; i++ {
		os := testenv.SimulatedOS[i%len(testenv.SimulatedOS)]
		out[builder.DriverDaemonSetFor(builder.NodeOS{ID: os.ID, VersionID: os.VersionID})]++
	}
	return out
}()

func waitState(t *testing.T, name string, want gpuv1alpha1.ClusterPolicyState) *gpuv1alpha1.ClusterPolicy {
	t.Helper()
	var cp *gpuv1alpha1.ClusterPolicy
	testenv.Eventually(t, 90*time.Second, func() error {
		cp = getPolicy(t, name)
		if cp.Status.State != want || cp.Status.ObservedGeneration != cp.Generation {
			return fmt.Errorf("state %q (generation %d observed %d): %s", cp.Status.State, cp.Generation, cp.Status.ObservedGeneration, conditions.GetMessage(cp, status.ReadyCondition))
		}
		return nil
	})
	return cp
}

func TestClusterPolicy(t *testing.T) {
	ctx := context.Background()
	// The example selects nodes labelled gpu=true: label the GPU nodes only.
	for _, name := range env.Nodes {
		if !strings.HasPrefix(name, "gpu-") {
			continue
		}
		testenv.Update(t, k8s, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, func(n *corev1.Node) { n.Labels["gpu"] = "true" })
	}
	cp := &gpuv1alpha1.ClusterPolicy{}
	testenv.LoadCase(t, testenv.Seed("gpu-cluster-config"), cp)
	if err := k8s.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), cp) })
	ns := "gpu-operator"

	t.Run("without the ServiceMonitor CRD it deploys the rest and says so", func(t *testing.T) {
		testenv.Eventually(t, 90*time.Second, func() error {
			cp := getPolicy(t, cp.Name)
			c := conditions.Get(cp, ServiceMonitorCondition)
			if c == nil || c.Reason != ReasonServiceMonitorCRDMissing {
				return fmt.Errorf("no %s condition: %+v", ReasonServiceMonitorCRDMissing, cp.Status.Conditions)
			}
			if cp.Status.State != gpuv1alpha1.StateNotReady || conditions.IsReady(cp) {
				return fmt.Errorf("state %s: a missing ServiceMonitor must not be a silent Ready", cp.Status.State)
			}
			if !strings.Contains(conditions.GetMessage(cp, status.ReadyCondition), "ServiceMonitor CRD is not installed") {
				return fmt.Errorf("Ready message does not say why: %q", conditions.GetMessage(cp, status.ReadyCondition))
			}
			for name := range stackDaemonSets {
				if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &appsv1.DaemonSet{}); err != nil {
					return err
				}
			}
			return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.DevicePluginConfigMap}, &corev1.ConfigMap{})
		})
	})

	t.Run("with the CRD it becomes ready with honest counts", func(t *testing.T) {
		testenv.InstallYAML(t, k8s, filepath.Join("..", "..", "..", "testdata", "crds", "servicemonitors.monitoring.coreos.com.yaml"))
		got := waitState(t, cp.Name, gpuv1alpha1.StateReady)
		if !conditions.IsReady(got) || !conditions.IsTrue(got, ServiceMonitorCondition) {
			t.Errorf("conditions %+v", got.Status.Conditions)
		}
		running := stackPods(t, ns)
		if len(got.Status.Components) != len(stackDaemonSets) {
			t.Fatalf("components %+v, want %d", got.Status.Components, len(stackDaemonSets))
		}
		for _, c := range got.Status.Components {
			want := stackDaemonSets[c.Name]
			if want == 0 || c.Desired != want || c.Ready != want || running[c.Name] != c.Ready {
				t.Errorf("component %+v: want %d desired and ready, matching the %d ready pods", c, want, running[c.Name])
			}
		}
		sm := &unstructured.Unstructured{}
		sm.SetGroupVersionKind(builder.ServiceMonitorGVK)
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.DCGMExporterService}, sm); err != nil {
			t.Fatalf("ServiceMonitor: %v", err)
		}
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 || eps[0].(map[string]any)["interval"] != "15s" || eps[0].(map[string]any)["port"] != "gpu-metrics" {
			t.Errorf("ServiceMonitor endpoints %v", eps)
		}
	})

	t.Run("a second ClusterPolicy is ignored", func(t *testing.T) {
		second := &gpuv1alpha1.ClusterPolicy{}
		second.Name = "latecomer"
		if err := k8s.Create(ctx, second); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = k8s.Delete(context.Background(), second) }()
		got := waitState(t, "latecomer", gpuv1alpha1.StateIgnored)
		if msg := conditions.GetMessage(got, status.ReadyCondition); !strings.Contains(msg, cp.Name) {
			t.Errorf("message %q does not name the active ClusterPolicy", msg)
		}
		if getPolicy(t, cp.Name).Status.State != gpuv1alpha1.StateReady {
			t.Error("the active ClusterPolicy stopped being ready")
		}
	})

	t.Run("unchanged reconcile writes nothing", func(t *testing.T) {
		r := &Reconciler{Deps: children.Deps{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("test"), Config: testCfg}}
		if err := r.SetupDiscovery(mgr.GetConfig()); err != nil {
			t.Fatal(err)
		}
		versions := func() string {
			var out []string
			out = append(out, getPolicy(t, cp.Name).ResourceVersion)
			var dss appsv1.DaemonSetList
			if err := k8s.List(ctx, &dss, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			for _, d := range dss.Items {
				out = append(out, d.Name+"="+d.ResourceVersion)
			}
			return strings.Join(out, " ")
		}
		var before string
		testenv.Eventually(t, 10*time.Second, func() error {
			before = versions()
			cached := &gpuv1alpha1.ClusterPolicy{}
			if err := mgr.GetClient().Get(ctx, client.ObjectKey{Name: cp.Name}, cached); err != nil {
				return err
			}
			if !strings.HasPrefix(before, cached.ResourceVersion+" ") {
				return fmt.Errorf("cache behind")
			}
			return nil
		})
		drifted := testenv.Metric(t, "trainops_children_drift_corrected_total", "", "")
		for i := 0; i < 3; i++ {
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: cp.Name}}); err != nil {
				t.Fatal(err)
			}
		}
		if n := testenv.Metric(t, "trainops_children_drift_corrected_total", "", "") - drifted; n != 0 {
			t.Errorf("%v settled children counted as drifted and applied again", n)
		}
		if after := versions(); after != before {
			t.Fatalf("reconciling an unchanged ClusterPolicy wrote:\n%s\n%s", before, after)
		}
	})

	t.Run("a DaemonSet re-imaged by hand is put back", func(t *testing.T) { daemonSetPutBack(t, cp, ns) })
	t.Run("a ConfigMap and a Service edited by hand are put back", func(t *testing.T) { stackPutBack(t, cp, ns) })

	t.Run("GPU nodes get the GPU Operator's labels", func(t *testing.T) { nodesLabelled(t, cp) })
	t.Run("an opt-out label keeps one component off one node", func(t *testing.T) { optOut(t, cp, ns) })
	t.Run("each GPU node runs the driver of its OS", func(t *testing.T) { driverPerOS(t, cp, ns) })
	t.Run("the validator may list the GPU namespace's DaemonSets, and no more", func(t *testing.T) { validatorListsDaemonSets(t, ns) })
	t.Run("a GPU node without OS labels is named, and its driver waits for them", func(t *testing.T) { nodeWithoutOS(t, cp, ns) })

	t.Run("editing time-slicing rolls the device plugin", func(t *testing.T) {
		ds := &appsv1.DaemonSet{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.DevicePluginDaemonSet}, ds); err != nil {
			t.Fatal(err)
		}
		gen := ds.Generation
		updatePolicy(t, cp.Name, func(cur *gpuv1alpha1.ClusterPolicy) {
			cur.Spec.DevicePlugin.Config.Sharing.TimeSlicing.Resources[0].Replicas = 8
		})
		testenv.Eventually(t, 30*time.Second, func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(ds), ds); err != nil {
				return err
			}
			if ds.Generation == gen {
				return fmt.Errorf("device plugin DaemonSet not updated")
			}
			cm := &corev1.ConfigMap{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.DevicePluginConfigMap}, cm); err != nil {
				return err
			}
			if !strings.Contains(cm.Data["config.yaml"], "replicas: 8") {
				return fmt.Errorf("config not updated: %s", cm.Data["config.yaml"])
			}
			return nil
		})
		waitState(t, cp.Name, gpuv1alpha1.StateReady)
	})

	t.Run("a node labelled for a per-node configuration gets its own device plugin", func(t *testing.T) { perNodeConfig(t, cp, ns) })

	t.Run("disabling dcgm removes its DaemonSet, Service and ServiceMonitor", func(t *testing.T) {
		updatePolicy(t, cp.Name, func(cur *gpuv1alpha1.ClusterPolicy) { cur.Spec.DCGM.Exporter.Enabled = ptr.To(false) })
		sm := &unstructured.Unstructured{}
		sm.SetGroupVersionKind(builder.ServiceMonitorGVK)
		testenv.Eventually(t, 30*time.Second, func() error {
			for _, o := range []client.Object{&appsv1.DaemonSet{}, &corev1.Service{}, sm} {
				if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.DCGMExporterDaemonSet}, o); !apierrors.IsNotFound(err) {
					return fmt.Errorf("%T still there (err %v)", o, err)
				}
			}
			return nil
		})
		got := waitState(t, cp.Name, gpuv1alpha1.StateReady)
		for _, c := range got.Status.Components {
			if c.Name == builder.DCGMExporterDaemonSet {
				t.Errorf("status still lists %s", c.Name)
			}
		}
		if conditions.Get(got, ServiceMonitorCondition) != nil {
			t.Errorf("ServiceMonitor condition kept after the exporter was turned off")
		}
	})

	t.Run("a DaemonSet of the stack's name that trainops did not create is left alone", func(t *testing.T) { foreignDaemonSet(t, cp, ns) })
	t.Run("takeOverExisting takes a foreign DaemonSet over", func(t *testing.T) { takeOver(t, cp, ns) })
	t.Run("beside a GPU Operator nothing is applied", func(t *testing.T) { gpuOperatorPresent(t, cp, ns) })
	t.Run("the MIG manager comes with its RBAC and layouts, and goes with them", func(t *testing.T) { migManager(t, cp, ns) })
	t.Run("deleting the ClusterPolicy removes trainops's node labels", func(t *testing.T) { labelsGoWithThePolicy(t, cp) })
}
