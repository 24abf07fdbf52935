// SPDX-License-Identifier: Apache-2.0

package remediation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/gpustack"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/gpustacktest"
)

const (
	interval        = 5 * time.Second
	minOutOfService = 20 * time.Second
	drainTimeout    = 10 * time.Second
	// slack is what a pass may take beyond its interval here.
	slack = 10 * time.Second
)

// healthMessage is the GPUNodesHealthy condition's message.
func healthMessage(t *testing.T) (string, bool) {
	c := conditions.Get(gpustacktest.Policy(t, k8s), gpustack.GPUNodesHealthyCondition)
	if c == nil {
		return "", false
	}
	return c.Message, c.Status == metav1.ConditionTrue
}

func messageHas(t *testing.T, timeout time.Duration, parts ...string) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		msg, _ := healthMessage(t)
		for _, p := range parts {
			if !strings.Contains(msg, p) {
				return fmt.Errorf("GPUNodesHealthy %q lacks %q", msg, p)
			}
		}
		return nil
	})
}

// outOfService reports the value of trainops's taint on a node, and
// whether the node is cordoned.
func outOfService(t *testing.T, name string) (string, bool) {
	n := testenv.Node(t, k8s, name)
	for _, taint := range n.Spec.Taints {
		if taint.Key == gpuv1alpha1.RemediationTaintKey && taint.Effect == corev1.TaintEffectNoSchedule {
			return taint.Value, n.Spec.Unschedulable
		}
	}
	return "", n.Spec.Unschedulable
}

// eventAbout reports whether an Event of reason regards the named object.
func eventAbout(t *testing.T, reason, name string) bool {
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool { return e.Reason == reason && e.Regarding.Name == name })
}

// eventNoteHas reports whether an Event about the named object says text.
func eventNoteHas(t *testing.T, name, text string) bool {
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool { return e.Regarding.Name == name && strings.Contains(e.Note, text) })
}

func setCondition(t *testing.T, name string, status corev1.ConditionStatus, reason string) {
	t.Helper()
	n := testenv.Node(t, k8s, name)
	n.Status.Conditions = slices.DeleteFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == "GPUXidError" })
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "GPUXidError", Status: status, Reason: reason, Message: "reported by the test's health reporter", LastTransitionTime: metav1.Now()})
	if err := k8s.Status().Update(context.Background(), n); err != nil {
		t.Fatal(err)
	}
}

func TestRemediation(t *testing.T) {
	ctx := context.Background()
	gpu := env.GPUNodeNames()
	a, b, c := gpu[0], gpu[1], gpu[2]
	gpustacktest.EnsurePolicy(t, k8s)
	testenv.Update(t, k8s, gpustacktest.Policy(t, k8s), func(cp *gpuv1alpha1.ClusterPolicy) {
		cp.Spec.Remediation = gpuv1alpha1.RemediationSpec{Enabled: true, MaxUnavailable: ptr.To(intstr.FromInt32(1)), NodeConditions: []string{"GPUXidError"},
			Interval: &metav1.Duration{Duration: interval}, HealthyFor: &metav1.Duration{Duration: 3 * time.Second},
			MinOutOfService: &metav1.Duration{Duration: minOutOfService}, Drain: gpuv1alpha1.DrainSpec{Timeout: &metav1.Duration{Duration: drainTimeout}}}
	})
	// Every exporter serves a healthy sample: once the exporter pods are
	// ready, no node's health is unknown.
	testenv.Eventually(t, 3*time.Minute, func() error {
		if msg, allIn := healthMessage(t); !allIn || msg != fmt.Sprintf("all %d GPU nodes in service", gpuNodes) {
			return fmt.Errorf("GPUNodesHealthy: %q", msg)
		}
		return nil
	})

	ns := testenv.NewNamespace(t, k8s)
	t.Run("XID 79 takes its node out within one interval, XID 13 does nothing", func(t *testing.T) {
		for _, p := range []*corev1.Pod{gpustacktest.GPUPod(ns, "free", a, nil), gpustacktest.GPUPod(ns, "kept", a, map[string]string{"keep": "yes"}), gpustacktest.GPUPod(ns, "other", b, nil)} {
			if err := k8s.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keep"}, Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"keep": "yes"}}}}
		if err := k8s.Create(ctx, pdb); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, time.Minute, func() error {
			for _, name := range []string{"free", "kept", "other"} {
				p := &corev1.Pod{}
				if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil || p.Status.Phase != corev1.PodRunning {
					return fmt.Errorf("pod %s not running yet", name)
				}
			}
			got := &policyv1.PodDisruptionBudget{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(pdb), got); err != nil || got.Status.DisruptionsAllowed != 0 || got.Status.CurrentHealthy != 1 {
				return fmt.Errorf("PodDisruptionBudget not settled: %+v", got.Status)
			}
			return nil
		})
		exporters[a].serve(sample("xid-error.prom"), false)
		exporters[b].serve(sample("xid-13.prom"), false)
		start := time.Now()
		testenv.Eventually(t, interval+slack, func() error {
			if cause, cordoned := outOfService(t, a); cause != "xid-79" || !cordoned {
				return fmt.Errorf("node %s: taint %q, cordoned %v", a, cause, cordoned)
			}
			return nil
		})
		t.Logf("XID 79 to taint and cordon: %s", time.Since(start).Round(time.Millisecond))
		testenv.Eventually(t, 30*time.Second, func() error {
			if gpustacktest.PodLive(k8s, ns, "free") {
				return fmt.Errorf("pod free not evicted")
			}
			return nil
		})
		messageHas(t, 30*time.Second, a+" (xid-79", "eviction refused for "+ns+"/kept by PodDisruptionBudget "+ns+"/keep")
		messageHas(t, drainTimeout+slack, "drain.timeout passed, nothing force-deleted (drain.force is off)")
		if !gpustacktest.PodLive(k8s, ns, "kept") {
			t.Fatal("the pod a PodDisruptionBudget protects was removed")
		}
		if cause, cordoned := outOfService(t, b); cause != "" || cordoned || !gpustacktest.PodLive(k8s, ns, "other") {
			t.Fatalf("node %s with XID 13: taint %q, cordoned %v, its pod live %v", b, cause, cordoned, gpustacktest.PodLive(k8s, ns, "other"))
		}
		if !eventAbout(t, "GPUProblemReported", b) || !eventAbout(t, "NodeOutOfService", a) || !eventAbout(t, "NodeOutOfService", "gpu") {
			t.Error("missing Events: GPUProblemReported on the XID 13 node, NodeOutOfService on the node and the ClusterPolicy")
		}
		if v := testenv.Metric(t, "trainops_gpu_nodes_out_of_service", "cause", "xid-79"); v != 1 {
			t.Errorf("trainops_gpu_nodes_out_of_service{cause=xid-79} = %v, want 1", v)
		}
	})

	t.Run("a second failing node waits while maxUnavailable nodes are out", func(t *testing.T) {
		setCondition(t, c, corev1.ConditionTrue, "GPUFellOffTheBus")
		messageHas(t, interval+slack, "waiting, as maxUnavailable (1) GPU nodes are out of service: "+c+" (GPUXidError)")
		if cause, cordoned := outOfService(t, c); cause != "" || cordoned {
			t.Fatalf("node %s over maxUnavailable: taint %q, cordoned %v", c, cause, cordoned)
		}
	})

	t.Run("a healthy node returns after its driver restarts and its minimum time, keeping an admin's taint", func(t *testing.T) {
		var rec struct{ Since metav1.Time }
		if err := json.Unmarshal([]byte(testenv.Node(t, k8s, a).Annotations[gpuv1alpha1.RemediationAnnotation]), &rec); err != nil {
			t.Fatal(err)
		}
		exporters[a].serve(sample("healthy.prom"), false)
		defer func() {
			if t.Failed() {
				var pods corev1.PodList
				_ = k8s.List(ctx, &pods, client.InNamespace(gpustacktest.Namespace))
				for _, p := range pods.Items {
					t.Logf("pod %s node %s ip %s phase %s conds %v", p.Name, p.Spec.NodeName, p.Status.PodIP, p.Status.Phase, p.Status.Conditions)
				}
				var sl discoveryv1.EndpointSliceList
				_ = k8s.List(ctx, &sl, client.InNamespace(gpustacktest.Namespace))
				for _, x := range sl.Items {
					for _, ep := range x.Endpoints {
						t.Logf("slice %s ep %v ready %v node %v ref %v", x.Name, ep.Addresses, *ep.Conditions.Ready, *ep.NodeName, ep.TargetRef.Name)
					}
				}
			}
		}()
		messageHas(t, interval+slack, "healthy, waiting for its driver pod to restart or the node to reboot")
		if cause, _ := outOfService(t, a); cause == "" {
			t.Fatal("returned before its driver restarted")
		}
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(gpustacktest.Namespace), client.MatchingFields{"spec.nodeName": a}); err != nil {
			t.Fatal(err)
		}
		deleted := 0
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Labels["app"], builder.DriverDaemonSet) {
				if err := k8s.Delete(ctx, &p); err != nil {
					t.Fatal(err)
				}
				deleted++
			}
		}
		if deleted != 1 {
			t.Fatalf("%d driver pods on %s", deleted, a)
		}
		// The driver DaemonSet tolerates trainops's taint: its new pod
		// comes to the node out of service. Then an admin taints the node
		// for a reason of their own (which the driver does not tolerate).
		testenv.Eventually(t, 30*time.Second, func() error {
			var pods corev1.PodList
			if err := k8s.List(ctx, &pods, client.InNamespace(gpustacktest.Namespace), client.MatchingFields{"spec.nodeName": a}); err != nil {
				return err
			}
			if !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
				return strings.HasPrefix(p.Labels["app"], builder.DriverDaemonSet) && p.DeletionTimestamp.IsZero()
			}) {
				return fmt.Errorf("no new driver pod on %s", a)
			}
			return nil
		})
		admin := corev1.Taint{Key: "example.com/maintenance", Value: "planned", Effect: corev1.TaintEffectNoSchedule}
		testenv.Update(t, k8s, testenv.Node(t, k8s, a), func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, admin) })
		t.Cleanup(func() {
			testenv.Update(t, k8s, testenv.Node(t, k8s, a), func(n *corev1.Node) {
				n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == admin.Key })
			})
		})
		testenv.Eventually(t, minOutOfService+interval+slack, func() error {
			if cause, cordoned := outOfService(t, a); cause != "" || cordoned {
				msg, _ := healthMessage(t)
				return fmt.Errorf("node %s: taint %q, cordoned %v, record %s; GPUNodesHealthy %q", a, cause, cordoned, testenv.Node(t, k8s, a).Annotations[gpuv1alpha1.RemediationAnnotation], msg)
			}
			return nil
		})
		if out := time.Since(rec.Since.Time); out < minOutOfService {
			t.Errorf("returned after %s out of service, under minOutOfService %s", out, minOutOfService)
		}
		n := testenv.Node(t, k8s, a)
		if !slices.Contains(n.Spec.Taints, admin) || n.Annotations[gpuv1alpha1.RemediationAnnotation] != "" {
			t.Fatalf("after return: taints %+v, record %q", n.Spec.Taints, n.Annotations[gpuv1alpha1.RemediationAnnotation])
		}
		if !gpustacktest.PodLive(k8s, ns, "kept") {
			t.Fatal("the pod a PodDisruptionBudget protects was removed")
		}
		// The waiting node goes out now that there is room.
		testenv.Eventually(t, interval+slack, func() error {
			if cause, cordoned := outOfService(t, c); cause != "GPUXidError" || !cordoned {
				return fmt.Errorf("node %s: taint %q, cordoned %v", c, cause, cordoned)
			}
			return nil
		})
	})

	t.Run("an admin's remediated label returns a node at once", func(t *testing.T) {
		setCondition(t, c, corev1.ConditionFalse, "GPUHealthy")
		testenv.Update(t, k8s, testenv.Node(t, k8s, c), func(n *corev1.Node) { n.Labels[gpuv1alpha1.RemediatedLabel] = "true" })
		testenv.Eventually(t, interval+slack, func() error {
			n := testenv.Node(t, k8s, c)
			if cause, cordoned := outOfService(t, c); cause != "" || cordoned || n.Labels[gpuv1alpha1.RemediatedLabel] != "" {
				return fmt.Errorf("node %s: taint %q, cordoned %v, labels %v", c, cause, cordoned, n.Labels)
			}
			return nil
		})
	})

	t.Run("an exporter that hangs or answers garbage leaves its node in service, health unknown", func(t *testing.T) {
		exporters[b].serve(nil, true)
		exporters[c].serve([]byte("<html><body>502 Bad Gateway</body></html>"), false)
		messageHas(t, 2*interval+slack, "health unknown, left in service: ", b+" (its DCGM exporter: ", c+" (its DCGM exporter: parse DCGM metrics")
		for _, name := range []string{b, c} {
			if cause, cordoned := outOfService(t, name); cause != "" || cordoned {
				t.Fatalf("node %s of unknown health: taint %q, cordoned %v", name, cause, cordoned)
			}
		}
		exporters[b].serve(sample("healthy.prom"), false)
		exporters[c].serve(sample("healthy.prom"), false)
	})

	t.Run("objects wearing the exporter's labels are never read", func(t *testing.T) {
		hostile(t, a)
	})

	t.Run("a hot GPU is reported and its node kept in service until it stays hot", func(t *testing.T) {
		testenv.Update(t, k8s, gpustacktest.Policy(t, k8s), func(cp *gpuv1alpha1.ClusterPolicy) {
			cp.Spec.Remediation.MaxGPUTemperature = ptr.To[int32](90)
			cp.Spec.Remediation.GPUTemperatureFor = &metav1.Duration{Duration: time.Hour}
		})
		exporters[b].serve(sample("hot.prom"), false)
		// The Event is the reconciler's reading of the hot GPU: it saw it
		// before the node's taint is looked at.
		testenv.Eventually(t, 2*interval+slack, func() error {
			if !eventAbout(t, "GPUProblemReported", b) || !eventNoteHas(t, b, "gpuTemperatureFor 1h0m0s") {
				return fmt.Errorf("no GPUProblemReported Event on %s naming the wait", b)
			}
			return nil
		})
		if cause, cordoned := outOfService(t, b); cause != "" || cordoned {
			t.Fatalf("node %s hot for less than gpuTemperatureFor: taint %q, cordoned %v", b, cause, cordoned)
		}
		exporters[b].serve(sample("healthy.prom"), false)
		testenv.Update(t, k8s, gpustacktest.Policy(t, k8s), func(cp *gpuv1alpha1.ClusterPolicy) {
			cp.Spec.Remediation.MaxGPUTemperature, cp.Spec.Remediation.GPUTemperatureFor = nil, nil
		})
	})

	t.Run("turning remediation off returns every node", func(t *testing.T) {
		exporters[b].serve(sample("ecc.prom"), false)
		testenv.Eventually(t, interval+slack, func() error {
			if cause, _ := outOfService(t, b); cause != "row-remap-failure" {
				return fmt.Errorf("node %s: taint %q", b, cause)
			}
			return nil
		})
		testenv.Update(t, k8s, gpustacktest.Policy(t, k8s), func(cp *gpuv1alpha1.ClusterPolicy) { cp.Spec.Remediation.Enabled = false })
		testenv.Eventually(t, slack, func() error {
			if cause, cordoned := outOfService(t, b); cause != "" || cordoned {
				return fmt.Errorf("node %s: taint %q, cordoned %v", b, cause, cordoned)
			}
			if conditions.Has(gpustacktest.Policy(t, k8s), gpustack.GPUNodesHealthyCondition) {
				return fmt.Errorf("GPUNodesHealthy still set")
			}
			return nil
		})
	})
}

// hostile makes a pod wearing the exporter's label and an EndpointSlice
// wearing its Service's, both pointing at the CPU node, and checks that
// trainops sent them nothing while it kept reading the real exporters.
func hostile(t *testing.T, onNode string) {
	ctx := context.Background()
	cpu := ""
	for _, n := range env.Nodes {
		if !strings.HasPrefix(n, "gpu-") {
			cpu = n
		}
	}
	// A controller of its own keeps the exporter DaemonSet from adopting
	// the pod; the Service still selects it.
	decoy := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: gpustacktest.Namespace, Name: "decoy"}}
	if err := k8s.Create(ctx, decoy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), decoy) })
	fake := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: gpustacktest.Namespace, Name: "not-an-exporter", Labels: map[string]string{"app": builder.DCGMExporterDaemonSet},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: decoy.Name, UID: decoy.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: cpu, Containers: []corev1.Container{{Name: "x", Image: "registry.trainops.test/x:1",
			Ports: []corev1.ContainerPort{{Name: builder.DCGMExporterPortName, ContainerPort: builder.DCGMExporterPort}}}}}}
	if err := k8s.Create(ctx, fake); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), fake) })
	testenv.Eventually(t, time.Minute, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(fake), fake); err != nil || fake.Status.PodIP == "" {
			return fmt.Errorf("pod has no address yet")
		}
		return nil
	})
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: gpustacktest.Namespace, Name: "crafted", Labels: map[string]string{discoveryv1.LabelServiceName: builder.DCGMExporterService}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(builder.DCGMExporterPortName), Port: ptr.To(int32(builder.DCGMExporterPort))}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{fake.Status.PodIP}, NodeName: ptr.To(onNode),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: gpustacktest.Namespace, Name: fake.Name, UID: fake.UID}}},
	}
	if err := k8s.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), slice) })
	trap.Store(0)
	before := map[string]int64{}
	for n, e := range exporters {
		before[n] = e.hits.Load()
	}
	// Three passes are the proof: a pass reads every ready exporter, so
	// one read three more times took three. Not only onNode's: its pod may
	// be replaced meanwhile, and is not read until ready. The bound only
	// tolerates a loaded machine, where a pass can wait on another node's
	// slow exporter.
	testenv.Eventually(t, time.Minute+3*interval, func() error {
		most, read := int64(0), map[string]int64{}
		for n, e := range exporters {
			read[n] = e.hits.Load() - before[n]
			most = max(most, read[n])
		}
		if most < 3 {
			return fmt.Errorf("at most %d passes read an exporter so far (reads by node: %v)", most, read)
		}
		return nil
	})
	if n := trap.Load(); n != 0 {
		t.Fatalf("%d connections to addresses that are no exporter pod of the ClusterPolicy", n)
	}
}
