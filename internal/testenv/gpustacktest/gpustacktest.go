// SPDX-License-Identifier: Apache-2.0

// Package gpustacktest is the test support of the GPU node tests that
// need a control plane of their own (remediation, driver upgrades): a
// manager running the GPU stack's reconcilers, the cluster's one
// ClusterPolicy, and GPU pods on chosen nodes.
package gpustacktest

import (
	"context"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/controller/clusterpolicy"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/ctrltest"
)

// Namespace is the GPU stack's namespace in these tests.
const Namespace = "gpu-operator"

// Start runs a manager with the GPU node labeller and the ClusterPolicy
// reconciler, plus what extra sets up with the same dependencies, and
// returns an uncached client for the tests.
func Start(ctx context.Context, e *testenv.Env, extra func(ctrl.Manager, children.Deps) error) (client.Client, error) {
	s, err := ctrltest.Start(ctx, e, children.CacheOptions(), func(mgr ctrl.Manager, d children.Deps) error {
		d.Config = config.Controllers{MaxConcurrentReconciles: 2, RetryDelay: time.Second}
		if err := (&clusterpolicy.NodeReconciler{Client: mgr.GetClient(), Config: d.Config}).SetupWithManager(mgr); err != nil {
			return err
		}
		if err := (&clusterpolicy.Reconciler{Deps: d}).SetupWithManager(mgr); err != nil {
			return err
		}
		return extra(mgr, d)
	})
	if err != nil {
		return nil, err
	}
	return s.Client, nil
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

// LogOnFailure logs, when t has failed, what moved the GPU stack's pods:
// the Events of Namespace and of the nodes (the DaemonSet controller's
// creations and deletions, trainops's own), oldest first, and each pod
// with its node, revision and creation time.
func LogOnFailure(t testing.TB, c client.Client) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx := context.Background()
		var evs []corev1.Event
		for _, ns := range []string{Namespace, metav1.NamespaceDefault} {
			var list corev1.EventList
			if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
				t.Logf("list the events of %s: %v", ns, err)
			}
			evs = append(evs, list.Items...)
		}
		sort.Slice(evs, func(i, j int) bool { return eventTime(evs[i]).Before(eventTime(evs[j])) })
		for _, e := range evs {
			t.Logf("event %s %s %s/%s %s: %s (%s, %s)", eventTime(e).Format(time.RFC3339Nano), e.InvolvedObject.Kind, e.InvolvedObject.Namespace,
				e.InvolvedObject.Name, e.Reason, e.Message, e.Source.Component, e.ReportingController)
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(Namespace)); err != nil {
			t.Logf("list the pods: %v", err)
		}
		for _, p := range pods.Items {
			t.Logf("pod %s node %s revision %s created %s deleting %v phase %s", p.Name, p.Spec.NodeName, p.Labels[appsv1.ControllerRevisionHashLabelKey],
				p.CreationTimestamp.Format(time.RFC3339), !p.DeletionTimestamp.IsZero(), p.Status.Phase)
		}
	})
}

func eventTime(e corev1.Event) time.Time {
	for _, t := range []time.Time{e.EventTime.Time, e.LastTimestamp.Time, e.FirstTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return e.CreationTimestamp.Time
}
