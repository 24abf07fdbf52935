// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"strings"
	"testing"

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
	shared := &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: gpuv1alpha1.ClusterPolicySpec{
		DevicePlugin: gpuv1alpha1.DevicePluginSpec{Config: &gpuv1alpha1.DevicePluginConfig{Sharing: &gpuv1alpha1.SharingSpec{
			TimeSlicing: &gpuv1alpha1.TimeSlicingSpec{Resources: []gpuv1alpha1.TimeSlicingResource{{Name: string(testenv.GPUResource), Replicas: replicas}}},
		}}},
	}}
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
