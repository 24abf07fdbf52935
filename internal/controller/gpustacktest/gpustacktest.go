// SPDX-License-Identifier: Apache-2.0

// Package gpustacktest is the test support of the GPU node tests that
// need a control plane of their own (remediation, driver upgrades): a
// manager running the GPU stack's reconcilers, the cluster's one
// ClusterPolicy, and GPU pods on chosen nodes.
package gpustacktest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/eventrec"
	"github.com/trainops/trainops/internal/testenv"
)

// Namespace is the GPU stack's namespace in these tests.
const Namespace = "gpu-operator"

// Start runs a manager with the GPU node labeller and the ClusterPolicy
// reconciler, plus what extra sets up with the same dependencies, and
// returns an uncached client for the tests.
func Start(ctx context.Context, e *testenv.Env, extra func(ctrl.Manager, controller.Deps) error) (client.Client, error) {
	scheme := controller.NewScheme()
	c, err := client.New(e.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Cache: controller.CacheOptions()})
	if err != nil {
		return nil, err
	}
	ev, err := eventrec.Attach(mgr)
	if err != nil {
		return nil, err
	}
	cfg := config.Controllers{MaxConcurrentReconciles: 2, RetryDelay: time.Second}
	deps := controller.Deps{Client: mgr.GetClient(), Recorder: ev.For(controller.EventSource), APIReader: mgr.GetAPIReader(), Config: cfg}
	if err := (&controller.GPUNodeReconciler{Client: mgr.GetClient(), Config: cfg}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&controller.ClusterPolicyReconciler{Deps: deps}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := extra(mgr, deps); err != nil {
		return nil, err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("cache did not sync")
	}
	return c, nil
}

// Node reads a node.
func Node(t testing.TB, c client.Client, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Policy reads the cluster's ClusterPolicy, gpu.
func Policy(t testing.TB, c client.Client) *gpuv1alpha1.ClusterPolicy {
	t.Helper()
	cp := &gpuv1alpha1.ClusterPolicy{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "gpu"}, cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

// EnsurePolicy creates the cluster's ClusterPolicy, gpu, if missing, its
// stack in Namespace, without a ServiceMonitor.
func EnsurePolicy(t testing.TB, c client.Client) {
	t.Helper()
	cp := &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: gpuv1alpha1.ClusterPolicySpec{Namespace: Namespace,
		DCGM: gpuv1alpha1.DCGMSpec{Exporter: gpuv1alpha1.DCGMExporterSpec{ServiceMonitor: gpuv1alpha1.ServiceMonitorSpec{Enabled: ptr.To(false)}}}}}
	if err := c.Create(context.Background(), cp); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
}

// GPUNodeNames are the simulated GPU nodes, by name.
func GPUNodeNames(e *testenv.Env) []string {
	var gpu []string
	for _, n := range e.Nodes {
		if strings.HasPrefix(n, "gpu-") {
			gpu = append(gpu, n)
		}
	}
	slices.Sort(gpu)
	return gpu
}

// GPUPod is a pod using one GPU on node.
func GPUPod(ns, name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{corev1.LabelHostname: node},
		Tolerations:  []corev1.Toleration{{Key: string(testenv.GPUResource), Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{Name: "trainer", Image: "registry.trainops.test/trainer:1", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{testenv.GPUResource: resource.MustParse("1")}}}},
	}}
}

// PodLive reports whether the pod exists and is not being deleted.
func PodLive(c client.Client, ns, name string) bool {
	p := &corev1.Pod{}
	err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p)
	return err == nil && p.DeletionTimestamp.IsZero()
}
