// SPDX-License-Identifier: Apache-2.0

// Package upgradetest runs driver upgrades against a local control plane
// of its own: a cluster has one ClusterPolicy, and a rollout cordons and
// drains every GPU node.
package upgradetest

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

var (
	env *testenv.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Full: true, GPUNodes: 3, Stages: []string{testenv.CrashLoopStage(brokenDriver, "CrashLoopBackOff", 3, "Error")}}, &env, start))
}

// start runs the GPU stack's reconcilers and the driver upgrade.
func start(ctx context.Context, e *testenv.Env) error {
	scheme := controller.NewScheme()
	var err error
	if k8s, err = client.New(e.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Cache: controller.CacheOptions()})
	if err != nil {
		return err
	}
	ev, err := eventrec.Attach(mgr)
	if err != nil {
		return err
	}
	cfg := config.Controllers{MaxConcurrentReconciles: 2, RetryDelay: time.Second}
	deps := controller.Deps{Client: mgr.GetClient(), Recorder: ev.For(controller.EventSource), APIReader: mgr.GetAPIReader(), Config: cfg}
	if err := (&controller.GPUNodeReconciler{Client: mgr.GetClient(), Config: cfg}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controller.ClusterPolicyReconciler{Deps: deps}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controller.DriverUpgradeReconciler{Deps: deps}).SetupWithManager(mgr); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("cache did not sync")
	}
	return nil
}

func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	testenv.Eventually(t, timeout, check)
}

func node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n
}

func policy(t *testing.T) *gpuv1alpha1.ClusterPolicy {
	t.Helper()
	cp := &gpuv1alpha1.ClusterPolicy{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: "gpu"}, cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

// ensurePolicy creates the cluster's ClusterPolicy, gpu.
func ensurePolicy(t *testing.T) {
	t.Helper()
	cp := &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: gpuv1alpha1.ClusterPolicySpec{Namespace: "gpu-operator",
		DCGM: gpuv1alpha1.DCGMSpec{Exporter: gpuv1alpha1.DCGMExporterSpec{ServiceMonitor: gpuv1alpha1.ServiceMonitorSpec{Enabled: ptr.To(false)}}}}}
	if err := k8s.Create(context.Background(), cp); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
}

// gpuNodeNames are the simulated GPU nodes, by name.
func gpuNodeNames() []string {
	var gpu []string
	for _, n := range env.Nodes {
		if strings.HasPrefix(n, "gpu-") {
			gpu = append(gpu, n)
		}
	}
	slices.Sort(gpu)
	return gpu
}

// trainingPod is a pod using one GPU on node.
func trainingPod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{corev1.LabelHostname: node},
		Tolerations:  []corev1.Toleration{{Key: string(testenv.GPUResource), Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{Name: "trainer", Image: "registry.trainops.test/trainer:1", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{testenv.GPUResource: resource.MustParse("1")}}}},
	}}
}

func podLive(t *testing.T, ns, name string) bool {
	p := &corev1.Pod{}
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p)
	return err == nil && p.DeletionTimestamp.IsZero()
}
