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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/trainops/trainops/internal/testenv"
)

// TestAPodRunsOnTheRealNode: a pod asking for two GPUs is scheduled onto
// the real node and its container really runs (Running, with a container ID
// from containerd), given exactly the two devices NVIDIA's device plugin
// allocated it: in the spec the runtime ran, one device-list mount per GPU
// named by the plugin's device ID (its volume-mounts strategy) and one
// /dev/nvidia<minor> per GPU, the IDs those the kubelet recorded for the
// pod, among the eight the plugin registered.
func TestAPodRunsOnTheRealNode(t *testing.T) {
	testenv.RequireRealNode(t, env)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	refs, err := testenv.Images()
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pause", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": testenv.RealNodeName},
			Containers: []corev1.Container{{Name: "pause", Image: refs["pause.tar"], ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{testenv.GPUResource: resource.MustParse("2")}}}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The node's GPUs are few: give this one back for the tests after.
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods("default").Delete(ctx, "pause", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		testenv.Eventually(t, time.Minute, func() error {
			if _, err := cs.CoreV1().Pods("default").Get(ctx, "pause", metav1.GetOptions{}); err == nil {
				return fmt.Errorf("pod pause still there")
			}
			return nil
		})
	})
	testenv.Eventually(t, time.Minute, func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "pause", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
			return fmt.Errorf("phase %s, %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		pod = p
		return nil
	})
	ids, devices := allocatedGPUs(bundleSpec(t, strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")))
	registered, byPod := kubeletDevices(t)
	if len(registered) != testenv.StandInGPUs {
		t.Errorf("the device plugin registered %d GPUs, want %d: %v", len(registered), testenv.StandInGPUs, registered)
	}
	given := byPod[string(pod.UID)]
	slices.Sort(ids)
	slices.Sort(given)
	if len(ids) != 2 || !slices.Equal(ids, given) {
		t.Errorf("the container's device-list mounts name %v; the kubelet allocated it %v (want the same two)", ids, given)
	}
	for _, id := range ids {
		if !slices.Contains(registered, id) {
			t.Errorf("the container was given %s, which the plugin never registered (%v)", id, registered)
		}
	}
	if len(devices) != 2 {
		t.Errorf("the container has NVIDIA device nodes %v, want one for each of its two GPUs", devices)
	}
}

// allocatedGPUs reads a container's spec for the GPUs NVIDIA's device
// plugin gave it under the volume-mounts strategy: the device IDs its
// device-list mounts name, and its /dev/nvidia<minor> device nodes.
func allocatedGPUs(s ociSpec) (ids, devices []string) {
	const listDir = "/var/run/nvidia-container-devices/"
	for _, m := range s.Mounts {
		if id, ok := strings.CutPrefix(m.Destination, listDir); ok {
			ids = append(ids, id)
		}
	}
	for _, d := range s.Linux.Devices {
		if n, ok := strings.CutPrefix(d.Path, "/dev/nvidia"); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			devices = append(devices, d.Path)
		}
	}
	return ids, devices
}

// kubeletDevices reads the kubelet's device-manager checkpoint: the
// nvidia.com/gpu devices registered by the plugin, and those allocated to
// each pod (by UID).
func kubeletDevices(t *testing.T) (registered []string, byPod map[string][]string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(pluginapi.DevicePluginPath, "kubelet_internal_checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	var cp struct {
		Data struct {
			PodDeviceEntries []struct {
				PodUID       string
				ResourceName string
				DeviceIDs    map[string][]string
			}
			RegisteredDevices map[string][]string
		}
	}
	if err := json.Unmarshal(raw, &cp); err != nil {
		t.Fatal(err)
	}
	byPod = map[string][]string{}
	for _, e := range cp.Data.PodDeviceEntries {
		if e.ResourceName != string(testenv.GPUResource) {
			continue
		}
		for _, ids := range e.DeviceIDs {
			byPod[e.PodUID] = append(byPod[e.PodUID], ids...)
		}
	}
	registered = cp.Data.RegisteredDevices[string(testenv.GPUResource)]
	slices.Sort(registered)
	return registered, byPod
}
