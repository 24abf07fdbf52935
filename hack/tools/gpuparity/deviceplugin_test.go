// SPDX-License-Identifier: Apache-2.0

package gpuparity

import (
	"bytes"
	"testing"

	dpv1 "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// TestDevicePluginConfigsParseWithDevicePlugin: every file of the device
// plugin's ConfigMap (the default and each per-node configuration) is read
// by the device plugin's own api/config/v1 as the plugin reads it (its
// types and their UnmarshalJSON checks, then the version), holds no key
// the plugin would ignore, and says what the ClusterPolicy asked.
func TestDevicePluginConfigsParseWithDevicePlugin(t *testing.T) {
	cp := clusterPolicy(t, "clusterpolicy-minimal")
	cp.Spec.DevicePlugin.Config = &gpuv1alpha1.DevicePluginConfig{Sharing: &gpuv1alpha1.SharingSpec{TimeSlicing: &gpuv1alpha1.TimeSlicingSpec{
		RenameByDefault: true, FailRequestsGreaterThanOne: true,
		Resources: []gpuv1alpha1.TimeSlicingResource{{Name: "nvidia.com/gpu", Replicas: 4}, {Name: "nvidia.com/mig-1g.10gb", Replicas: 2}},
	}}}
	cp.Spec.DevicePlugin.Config.PerNode = []gpuv1alpha1.NamedDevicePluginConfig{{Name: "shared-8", Sharing: gpuv1alpha1.SharingSpec{
		TimeSlicing: &gpuv1alpha1.TimeSlicingSpec{Resources: []gpuv1alpha1.TimeSlicingResource{{Name: "nvidia.com/gpu", Replicas: 8}}}}}}
	cm := built[*corev1.ConfigMap](t, cp, builder.DevicePluginConfigMap)
	want := map[string]int{"config.yaml": 4, "shared-8.yaml": 8}
	if len(cm.Data) != len(want) {
		t.Fatalf("ConfigMap keys %v, want %v", cm.Data, want)
	}
	for key, replicas := range want {
		raw := []byte(cm.Data[key])
		var c dpv1.Config
		if err := yaml.Unmarshal(raw, &c); err != nil {
			t.Fatalf("%s: the device plugin refuses it: %v\n%s", key, err, raw)
		}
		if c.Version != dpv1.Version {
			t.Errorf("%s: version %q, the device plugin reads %q", key, c.Version, dpv1.Version)
		}
		// The plugin ignores unknown keys: a key it does not know is a
		// setting silently lost.
		var strict dpv1.Config
		if err := yaml.UnmarshalStrict(raw, &strict); err != nil {
			t.Errorf("%s: a key the device plugin does not read: %v", key, err)
		}
		rr := c.Sharing.ReplicatedResources()
		if c.Sharing.SharingStrategy() != dpv1.SharingStrategyTimeSlicing || rr == nil || len(rr.Resources) == 0 {
			t.Fatalf("%s: the device plugin sees no time-slicing: %+v", key, c.Sharing)
		}
		if got := rr.Resources[0].Replicas; string(rr.Resources[0].Name) != "nvidia.com/gpu" || got != replicas {
			t.Errorf("%s: %s shared %d ways, want nvidia.com/gpu %d", key, rr.Resources[0].Name, got, replicas)
		}
		if key == "config.yaml" && (!rr.RenameByDefault || !rr.FailRequestsGreaterThanOne || len(rr.Resources) != 2) {
			t.Errorf("%s: renameByDefault %v, failRequestsGreaterThanOne %v, %d resources", key, rr.RenameByDefault, rr.FailRequestsGreaterThanOne, len(rr.Resources))
		}
		if bytes.Contains(raw, []byte("null")) {
			t.Errorf("%s holds a null:\n%s", key, raw)
		}
	}
}
