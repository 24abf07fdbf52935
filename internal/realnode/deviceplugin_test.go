// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/capacity"
	"github.com/trainops/trainops/internal/testenv"
)

// TestTimeSlicingAdvertisesReplicas: a ClusterPolicy sharing each GPU
// four ways runs NVIDIA's device plugin with the configuration file trainops
// writes into its ConfigMap; the plugin's own loader then registers four
// replicas of each of the stand-in's GPUs with the kubelet, named
// <uuid>::<replica>, and the node's allocatable is their number.
func TestTimeSlicingAdvertisesReplicas(t *testing.T) {
	testenv.RequireRealNode(t, env)
	ctx := context.Background()
	const replicas = 4
	shared := timeSliced("shared", replicas)
	t.Cleanup(func() {
		// The tests after this one expect the node's own GPUs, unshared.
		if err := env.StartDevicePlugin(ctx, &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, testenv.StandInGPUs); err != nil {
			t.Error(err)
		}
	})
	// diff's capacity plan counts what the plugin will advertise from the
	// node as it is now.
	cs := kubernetes.NewForConfigOrDie(env.Config)
	node, err := cs.CoreV1().Nodes().Get(ctx, env.RealNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	planned := capacity.NodeOffer(node, &shared.Spec)[string(testenv.GPUResource)]
	if err := env.StartDevicePlugin(ctx, shared, replicas*testenv.StandInGPUs); err != nil {
		t.Fatal(err)
	}
	if node, err = cs.CoreV1().Nodes().Get(ctx, env.RealNode, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := node.Status.Allocatable[testenv.GPUResource]; got.Value() != planned {
		t.Errorf("the plugin advertises %s GPUs; diff's capacity plan counts %d", got.String(), planned)
	}
	registered, _ := kubeletDevices(t)
	perGPU := map[string]int{}
	for _, id := range registered {
		gpu, replica, ok := strings.Cut(id, "::")
		if !ok || !strings.HasPrefix(gpu, "GPU-") || replica == "" {
			t.Errorf("registered device %q is not a replica of a GPU", id)
		}
		perGPU[gpu]++
	}
	if len(perGPU) != testenv.StandInGPUs {
		t.Errorf("replicas of %d GPUs registered, want the stand-in's %d: %v", len(perGPU), testenv.StandInGPUs, registered)
	}
	for gpu, n := range perGPU {
		if n != replicas {
			t.Errorf("%s has %d replicas, want %d", gpu, n, replicas)
		}
	}
}

// TestGFDLabelsTheGPUs: NVIDIA's GPU feature discovery, run as a
// ClusterPolicy's GFD DaemonSet runs it, labels the stand-in's GPUs from
// NVML: their product, memory and count. Under time-slicing four ways (the
// configuration file trainops writes into the ConfigMap GFD shares with the
// device plugin) it labels them shared, four replicas each. trainops's
// capacity plan, reading those labels on the node while the plugin
// advertises the four-way replicas, plans for a two-way ClusterPolicy what
// NVIDIA's plugin then advertises. Node Feature Discovery's own worker and
// master put GFD's labels on the Node.
func TestGFDLabelsTheGPUs(t *testing.T) {
	testenv.RequireRealNode(t, env)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(env.Config)
	t.Cleanup(func() {
		// The tests after this one expect the node's own GPUs, unshared,
		// and no GFD labels: GFD removes its file as it stops, and NFD's
		// next pass takes its labels off the Node.
		if err := env.StartDevicePlugin(ctx, &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, testenv.StandInGPUs); err != nil {
			t.Error(err)
		}
		env.StopGFD()
		if err := env.RunNFD(ctx); err != nil {
			t.Error(err)
		}
		testenv.Eventually(t, time.Minute, func() error {
			n, err := cs.CoreV1().Nodes().Get(ctx, env.RealNode, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if v, ok := n.Labels["nvidia.com/gpu.replicas"]; ok {
				return fmt.Errorf("GFD's label nvidia.com/gpu.replicas=%s still on the node", v)
			}
			return nil
		})
	})
	plain, err := env.StartGFD(ctx, &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	mock, err := testenv.StandInMachine()
	if err != nil {
		t.Fatal(err)
	}
	// GFD names the product by the GPU's name, spaces made dashes.
	want := map[string]string{
		"nvidia.com/gpu.count":   strconv.Itoa(testenv.StandInGPUs),
		"nvidia.com/gpu.product": strings.ReplaceAll(mock.GPUName, " ", "-"),
		"nvidia.com/gpu.memory":  strconv.Itoa(mock.GPUMemoryMiB),
	}
	for k, v := range want {
		if plain[k] != v {
			t.Errorf("GFD labels %s=%q, want %q (the DGX A100 mock's); all: %v", k, plain[k], v, plain)
		}
	}

	shared := timeSliced("shared", 4)
	labels, err := env.StartGFD(ctx, shared)
	if err != nil {
		t.Fatal(err)
	}
	if labels["nvidia.com/gpu.replicas"] != "4" || labels["nvidia.com/gpu.sharing-strategy"] != "time-slicing" || labels["nvidia.com/gpu.product"] != want["nvidia.com/gpu.product"]+"-SHARED" {
		t.Errorf("under four-way time-slicing GFD labels %v", labels)
	}
	if err := env.StartDevicePlugin(ctx, shared, 4*testenv.StandInGPUs); err != nil {
		t.Fatal(err)
	}
	// Node Feature Discovery's worker reads GFD's file; its master puts
	// the labels on the Node.
	if err := env.RunNFD(ctx); err != nil {
		t.Fatal(err)
	}
	var node *corev1.Node
	testenv.Eventually(t, time.Minute, func() error {
		if node, err = cs.CoreV1().Nodes().Get(ctx, env.RealNode, metav1.GetOptions{}); err != nil {
			return err
		}
		for k, v := range labels {
			if k != gfdTimestamp && node.Labels[k] != v {
				return fmt.Errorf("the node's label %s=%q, GFD wrote %q", k, node.Labels[k], v)
			}
		}
		return nil
	})
	twoWay := timeSliced("two-way", 2)
	planned := capacity.NodeOffer(node, &twoWay.Spec)[string(testenv.GPUResource)]
	if err := env.StartDevicePlugin(ctx, twoWay, 2*testenv.StandInGPUs); err != nil {
		t.Fatalf("the plugin under two-way time-slicing: %v (trainops planned %d)", err, planned)
	}
	if planned != 2*testenv.StandInGPUs {
		t.Errorf("with GFD's labels on the node, trainops plans %d GPUs for two-way time-slicing; NVIDIA's plugin advertises %d", planned, 2*testenv.StandInGPUs)
	}
}

// gfdTimestamp is the label GFD writes with the time of its pass.
const gfdTimestamp = "nvidia.com/gfd.timestamp"

// timeSliced is a ClusterPolicy name sharing each GPU replicas ways.
func timeSliced(name string, replicas int32) *gpuv1alpha1.ClusterPolicy {
	return &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: gpuv1alpha1.ClusterPolicySpec{
		DevicePlugin: gpuv1alpha1.DevicePluginSpec{Config: &gpuv1alpha1.DevicePluginConfig{Sharing: &gpuv1alpha1.SharingSpec{
			TimeSlicing: &gpuv1alpha1.TimeSlicingSpec{Resources: []gpuv1alpha1.TimeSlicingResource{{Name: string(testenv.GPUResource), Replicas: replicas}}},
		}}},
	}}
}
