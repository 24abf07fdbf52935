// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/gpustack"
	"github.com/trainops/trainops/internal/controller/pyjob"
	"github.com/trainops/trainops/internal/controller/remediation"
	"github.com/trainops/trainops/internal/gpuhealth/gpuhealthtest"
	"github.com/trainops/trainops/internal/testenv"
)

// exporterScript stands in for dcgm-exporter: it serves the file
// /trainops-exporter/metrics at /metrics and answers /health, on the port
// of DCGM_EXPORTER_LISTEN, which the GPU stack sets for the exporter.
const exporterScript = `import http.server, os
body = open('/trainops-exporter/metrics', 'rb').read()
port = int(os.environ.get('DCGM_EXPORTER_LISTEN', ':9400').rsplit(':', 1)[1])
class Exporter(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path not in ('/metrics', '/health'):
            self.send_error(404)
            return
        b = body if self.path == '/metrics' else b'OK'
        self.send_response(200)
        self.send_header('Content-Type', 'text/plain; version=0.0.4')
        self.send_header('Content-Length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)
http.server.ThreadingHTTPServer(('', port), Exporter).serve_forever()
`

// exporterImage pushes an image that serves testdata/dcgm's sample as the
// DCGM exporter does: the training image (for its Python) with the sample
// and exporterScript as its entrypoint.
func exporterImage(t *testing.T, sample, tag string) string {
	t.Helper()
	metrics := gpuhealthtest.Sample(t, sample)
	dir, err := testenv.ImageDir()
	if err != nil {
		t.Fatal(err)
	}
	base, err := tarball.ImageFromPath(filepath.Join(dir, "pytorch.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := crane.Layer(map[string][]byte{"trainops-exporter/metrics": metrics})
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config.DeepCopy()
	c.Entrypoint, c.Cmd = []string{"python3", "-c", exporterScript}, nil
	if img, err = mutate.Config(img, *c); err != nil {
		t.Fatal(err)
	}
	ref, err := env.PushImageOf(context.Background(), img, "trainops/test-dcgm-exporter", tag)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// setNode changes the node name and fails the test if it cannot.
func setNode(t *testing.T, name string, change func(*corev1.Node)) {
	t.Helper()
	testenv.Update(t, k8s, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, change)
}

// trainopsTaint is the value of trainops's remediation taint on the node
// name ("" without one), and whether the node is cordoned.
func trainopsTaint(t *testing.T, name string) (string, bool) {
	t.Helper()
	n := &corev1.Node{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	for _, taint := range n.Spec.Taints {
		if taint.Key == gpuv1alpha1.RemediationTaintKey {
			return taint.Value, n.Spec.Unschedulable
		}
	}
	return "", n.Spec.Unschedulable
}

// TestFailedGPUNodeMovesTheRun: a 2-worker PyJob runs on the real node;
// the ClusterPolicy's DCGM exporter there (a pod of its own DaemonSet,
// running a stand-in that serves testdata's XID 79 sample) reports GPU 1
// fallen off the bus. trainops taints and cordons the real node, evicts
// the running workers (the kubelet stops them), and the run restarts on
// the other GPU node without counting a failure. An admin's
// trainops.dev/remediated=true brings the node back.
func TestFailedGPUNodeMovesTheRun(t *testing.T) {
	testenv.RequireRealNode(t, env)
	ctx := context.Background()
	const interval = 5 * time.Second
	var spare string
	for _, n := range env.Nodes {
		if n != testenv.RealNodeName && spare == "" {
			spare = n
		}
	}
	if spare == "" {
		t.Fatal("no simulated GPU node to move the run to")
	}
	// The node is put back however the test ends.
	t.Cleanup(func() {
		setNode(t, testenv.RealNodeName, func(n *corev1.Node) {
			delete(n.Labels, gpuv1alpha1.RemediatedLabel)
			n.Spec.Unschedulable = false
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == gpuv1alpha1.RemediationTaintKey })
		})
		setNode(t, spare, func(n *corev1.Node) { n.Spec.Unschedulable = false })
	})

	// The first attempt runs on the real node: the simulated one is
	// cordoned until it has started.
	setNode(t, spare, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	ns := newNamespace(t)
	t.Cleanup(func() { release(t, ns) })
	pj := pythonJob(ns, "moved", "import time; time.sleep(600)")
	pj.Spec.NodeSelector = nil
	pj.Spec.Workers, pj.Spec.GPU = 2, 1
	pj.Spec.Tolerations = []corev1.Toleration{{Key: SimulatedTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	first := workers(t, ns, pj.Name, testenv.RealNodeName, true, 3*time.Minute)
	setNode(t, spare, func(n *corev1.Node) { n.Spec.Unschedulable = false })

	gpuNS, err := Namespace(ctx, env, k8s, "gpu-")
	if err != nil {
		t.Fatal(err)
	}
	// The exporter's ServiceAccount pulls from the node's registry, as
	// a platform gives the GPU stack its registry's credentials.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: builder.DCGMExporterDaemonSet, Namespace: gpuNS},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: PullSecret}}}
	if err := k8s.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	// The exporter waits for the toolkit's validation, as on a GPU node;
	// this node's validator is not real, so the test writes its file.
	if err := os.MkdirAll(builder.ValidationsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(builder.ToolkitReadyFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cp := &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: gpuv1alpha1.ClusterPolicySpec{
		Namespace: gpuNS, TakeOverExisting: true,
		Driver:           gpuv1alpha1.DriverSpec{Enabled: ptr.To(false)},
		ContainerRuntime: gpuv1alpha1.ContainerRuntimeSpec{Enabled: ptr.To(false)},
		DevicePlugin:     gpuv1alpha1.DevicePluginSpec{Enabled: ptr.To(false)},
		GFD:              gpuv1alpha1.GFDSpec{Enabled: ptr.To(false)},
		Validator:        gpuv1alpha1.ValidatorSpec{Image: images.Training},
		DCGM: gpuv1alpha1.DCGMSpec{Exporter: gpuv1alpha1.DCGMExporterSpec{Image: exporterImage(t, "xid-error.prom", "xid-79"),
			ServiceMonitor: gpuv1alpha1.ServiceMonitorSpec{Enabled: ptr.To(false)}}},
		Remediation: gpuv1alpha1.RemediationSpec{Enabled: true, MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Interval: &metav1.Duration{Duration: interval}, Drain: gpuv1alpha1.DrainSpec{Timeout: &metav1.Duration{Duration: time.Minute}}},
	}}
	if err := k8s.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k8s.Delete(ctx, cp); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
		release(t, gpuNS)
		_ = os.Remove(builder.ToolkitReadyFile)
	})

	// Out of service within one interval of the exporter's first
	// answer (its readiness, which the probe's initial delay puts off).
	testenv.Eventually(t, 4*time.Minute, func() error {
		if cause, cordoned := trainopsTaint(t, testenv.RealNodeName); cause != "xid-79" || !cordoned {
			return fmt.Errorf("the real node: taint %q, cordoned %v; %s", cause, cordoned, exporterPods(t, gpuNS))
		}
		return nil
	})
	var rec struct{ Since metav1.Time }
	node := &corev1.Node{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: testenv.RealNodeName}, node); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(node.Annotations[gpuv1alpha1.RemediationAnnotation]), &rec); err != nil {
		t.Fatalf("the node's %s annotation: %v", gpuv1alpha1.RemediationAnnotation, err)
	}
	// Both times are in whole seconds: one more for each.
	if took := rec.Since.Sub(exporterReady(t, gpuNS)); took > interval+2*time.Second {
		t.Errorf("out of service %s after the exporter was ready, more than one interval (%s)", took, interval)
	}
	// The workers were evicted and stopped by the kubelet; the run goes on
	// on the simulated node, not counted as a failure.
	moved := workers(t, ns, pj.Name, spare, false, 3*time.Minute)
	for _, uid := range moved {
		if slices.Contains(first, uid) {
			t.Errorf("pod %s of the first attempt is still there", uid)
		}
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(pj), pj); err != nil {
		t.Fatal(err)
	}
	if pj.Status.Restarts != 0 || pj.Status.Attempt != 1 {
		t.Errorf("restarts %d attempt %d, want 0 (not counted) and 1", pj.Status.Restarts, pj.Status.Attempt)
	}
	if notes := events(t, ns, pj.Name, pyjob.ReasonDisruption); len(notes) == 0 {
		t.Errorf("no %s Event on the PyJob", pyjob.ReasonDisruption)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(cp), cp); err != nil {
		t.Fatal(err)
	}
	if c := conditions.Get(cp, gpustack.GPUNodesHealthyCondition); c == nil || c.Status != metav1.ConditionFalse || c.Reason != remediation.ReasonNodesOutOfService {
		t.Errorf("GPUNodesHealthy %+v, want False, %s", c, remediation.ReasonNodesOutOfService)
	}
	if !nodeEvent(t, testenv.RealNodeName, gpuv1alpha1.NodeOutOfServiceReason) {
		t.Errorf("no %s Event on node %s", gpuv1alpha1.NodeOutOfServiceReason, testenv.RealNodeName)
	}

	// The exporter is replaced by one that reports healthy GPUs: without
	// a driver restart or a reboot the node stays out, until an admin
	// vouches for it; trainops then lifts its taint and cordon, for good.
	healthy := exporterImage(t, "healthy.prom", "healthy")
	testenv.Update(t, k8s, cp, func(cp *gpuv1alpha1.ClusterPolicy) { cp.Spec.DCGM.Exporter.Image = healthy })
	testenv.Eventually(t, 3*time.Minute, func() error {
		if exporterImageReady(t, gpuNS) != healthy {
			return fmt.Errorf("the healthy exporter is not ready: %s", exporterPods(t, gpuNS))
		}
		return nil
	})
	// Remediation has read the healthy samples (it says so) and keeps the
	// node out.
	testenv.AfterProof(t, 2*interval+30*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(cp), cp); err != nil {
			return err
		}
		if msg := conditions.GetMessage(cp, gpustack.GPUNodesHealthyCondition); !strings.Contains(msg, "healthy, waiting for its driver pod to restart or the node to reboot") {
			return fmt.Errorf("GPUNodesHealthy: %q", msg)
		}
		return nil
	}, func() error {
		if cause, cordoned := trainopsTaint(t, testenv.RealNodeName); cause != "xid-79" || !cordoned {
			return fmt.Errorf("healthy samples alone returned the node: taint %q, cordoned %v", cause, cordoned)
		}
		return nil
	})
	setNode(t, testenv.RealNodeName, func(n *corev1.Node) { n.Labels[gpuv1alpha1.RemediatedLabel] = "true" })
	testenv.Eventually(t, time.Minute, func() error {
		if cause, cordoned := trainopsTaint(t, testenv.RealNodeName); cause != "" || cordoned {
			return fmt.Errorf("the real node: taint %q, cordoned %v", cause, cordoned)
		}
		return nil
	})
	// Two passes of remediation later, it is still in service.
	passes := testenv.Metric(t, "controller_runtime_reconcile_total", "controller", "remediation")
	testenv.AfterProof(t, 3*interval+30*time.Second, func() error {
		if n := testenv.Metric(t, "controller_runtime_reconcile_total", "controller", "remediation"); n < passes+2 {
			return fmt.Errorf("%v remediation passes since the node returned, want 2", n-passes)
		}
		return nil
	}, func() error {
		if cause, cordoned := trainopsTaint(t, testenv.RealNodeName); cause != "" || cordoned {
			return fmt.Errorf("the node went out again: taint %q, cordoned %v", cause, cordoned)
		}
		return nil
	})
}

// exporterPod is the GPU namespace's ready exporter pod, if any.
func exporterPod(t *testing.T, ns string) *corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": builder.DCGMExporterDaemonSet}); err != nil {
		t.Fatal(err)
	}
	for i, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				return &pods.Items[i]
			}
		}
	}
	return nil
}

// exporterReady is when the exporter pod became ready.
func exporterReady(t *testing.T, ns string) time.Time {
	t.Helper()
	p := exporterPod(t, ns)
	if p == nil {
		t.Fatalf("no ready exporter: %s", exporterPods(t, ns))
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// exporterImageReady is the image of the ready exporter pod ("" if none).
func exporterImageReady(t *testing.T, ns string) string {
	t.Helper()
	if p := exporterPod(t, ns); p != nil {
		return p.Spec.Containers[0].Image
	}
	return ""
}

// workers waits until the PyJob name's two workers are scheduled on node
// (and running, when running) and returns their pods' UIDs.
func workers(t *testing.T, ns, name, node string, running bool, within time.Duration) []string {
	t.Helper()
	var uids []string
	testenv.Eventually(t, within, func() error {
		var pods corev1.PodList
		if err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{builder.LabelPyJob: name}); err != nil {
			return err
		}
		uids = uids[:0]
		var seen []string
		for _, p := range pods.Items {
			seen = append(seen, fmt.Sprintf("%s on %q %s", p.Name, p.Spec.NodeName, p.Status.Phase))
			if p.Spec.NodeName == node && p.DeletionTimestamp == nil && (!running || p.Status.Phase == corev1.PodRunning) {
				uids = append(uids, string(p.UID))
			}
		}
		if len(uids) != 2 || len(pods.Items) != 2 {
			return fmt.Errorf("want 2 workers on %s (running %v): %v", node, running, seen)
		}
		return nil
	})
	return uids
}

// exporterPods describes the pods of the GPU namespace, for a failure.
func exporterPods(t *testing.T, ns string) string {
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, fmt.Sprintf("%s %s ip %s %v", p.Name, p.Status.Phase, p.Status.PodIP, p.Status.ContainerStatuses))
	}
	return fmt.Sprint(out)
}

// nodeEvent reports whether an Event of reason regards the node name.
func nodeEvent(t *testing.T, name, reason string) bool {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Reason == reason && e.Regarding.Kind == "Node" && e.Regarding.Name == name {
			return true
		}
	}
	return false
}
