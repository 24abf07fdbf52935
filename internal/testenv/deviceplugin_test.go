// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
)

// TestDevicePluginEnvIsTheDaemonSetsOnTheNode: the real node's device
// plugin gets the environment of the ClusterPolicy's device plugin
// container, each path under a mount of the pod read as the node's: the
// configuration file trainops writes into its ConfigMap, written out under
// the folder given, and the driver root's mount point as the driver root.
func TestDevicePluginEnvIsTheDaemonSetsOnTheNode(t *testing.T) {
	cp := &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: gpuv1alpha1.ClusterPolicySpec{
		DevicePlugin: gpuv1alpha1.DevicePluginSpec{Config: &gpuv1alpha1.DevicePluginConfig{Sharing: &gpuv1alpha1.SharingSpec{
			TimeSlicing: &gpuv1alpha1.TimeSlicingSpec{Resources: []gpuv1alpha1.TimeSlicingResource{{Name: string(GPUResource), Replicas: 3}}},
		}}},
	}}
	dir := t.TempDir()
	env, err := devicePluginEnv(cp, dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for k, want := range map[string]string{
		"DEVICE_LIST_STRATEGY": "volume-mounts", "PASS_DEVICE_SPECS": "true", "DEVICE_ID_STRATEGY": "uuid",
		"DRIVER_ROOT_CTR_PATH": DriverRoot, "NVIDIA_DRIVER_ROOT": DriverRoot,
	} {
		if got[k] != want {
			t.Errorf("%s=%q, want %q", k, got[k], want)
		}
	}
	cfg := got["CONFIG_FILE"]
	if !strings.HasPrefix(cfg, dir+string(filepath.Separator)) {
		t.Fatalf("CONFIG_FILE=%q is not under %s", cfg, dir)
	}
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "replicas: 3") || !strings.Contains(string(raw), "version: v1") {
		t.Errorf("the plugin's configuration file is not the ClusterPolicy's sharing:\n%s", raw)
	}
}
