// SPDX-License-Identifier: Apache-2.0

package builder

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
)

// LabelDevicePluginConfig is the GPU Operator's node label naming the
// device plugin configuration a node uses.
const LabelDevicePluginConfig = "nvidia.com/device-plugin.config"

const (
	// devicePluginConfigKey is the default configuration's key in the
	// ConfigMap; a per-node configuration's is <name>.yaml.
	devicePluginConfigKey = "config.yaml"
	// devicePluginConfigPath is where the ConfigMap is mounted; the plugin
	// reads the file CONFIG_FILE names there.
	devicePluginConfigPath = "/config"
)

// devicePluginFile is the device plugin's own configuration file, format
// version v1 (api/config/v1 of the device plugin: Config, Sharing,
// TimeSlicing).
type devicePluginFile struct {
	Version string `json:"version"`
	Sharing struct {
		TimeSlicing struct {
			RenameByDefault            bool                              `json:"renameByDefault"`
			FailRequestsGreaterThanOne bool                              `json:"failRequestsGreaterThanOne"`
			Resources                  []gpuv1alpha1.TimeSlicingResource `json:"resources"`
		} `json:"timeSlicing"`
	} `json:"sharing"`
}

// devicePluginConfig renders a sharing spec as the device plugin's file;
// false when it asks for no time-slicing.
func devicePluginConfig(sh *gpuv1alpha1.SharingSpec) (string, bool) {
	if sh == nil || sh.TimeSlicing == nil {
		return "", false
	}
	var f devicePluginFile
	f.Version = "v1"
	ts := sh.TimeSlicing
	f.Sharing.TimeSlicing.RenameByDefault = ts.RenameByDefault
	f.Sharing.TimeSlicing.FailRequestsGreaterThanOne = ts.FailRequestsGreaterThanOne
	f.Sharing.TimeSlicing.Resources = ts.Resources
	b, err := yaml.Marshal(f)
	if err != nil {
		// Marshalling plain structs of strings and integers cannot fail.
		panic(err)
	}
	return string(b), true
}

// withConfig points c's plugin at key of the configuration ConfigMap, and
// rolls its pods when the file changes: the plugin reads it once.
func (c *component) withConfig(key, file string) {
	c.container.Env = append(c.container.Env, corev1.EnvVar{Name: "CONFIG_FILE", Value: devicePluginConfigPath + "/" + key})
	c.container.VolumeMounts = append(c.container.VolumeMounts, corev1.VolumeMount{Name: "config", MountPath: devicePluginConfigPath, ReadOnly: true})
	c.volumes = append(c.volumes, corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: DevicePluginConfigMap}}}})
	c.podAnnotations = map[string]string{AnnotationConfigHash: hashString(file)}
}

// perConfig builds a component that reads the device plugin's
// configuration file (the device plugin, GPU feature discovery) once for
// each configuration: the default DaemonSet, pointed at config.yaml when
// sharing is set, and one per per-node configuration, on the nodes labelled
// nvidia.com/device-plugin.config=<name> and pointed at <name>.yaml; the
// default one runs on every other GPU node. Moving a node from one
// configuration to another is relabelling it: its pods are replaced by the
// other DaemonSets'. build makes a fresh component each time; daemonSetFor
// names a per-node configuration's DaemonSet.
func perConfig(s gpuv1alpha1.ClusterPolicySpec, build func() component, daemonSetFor func(string) string) []component {
	comps := []component{build()}
	cfg := s.DevicePlugin.Config
	if cfg == nil {
		return comps
	}
	if file, ok := devicePluginConfig(cfg.Sharing); ok {
		comps[0].withConfig(devicePluginConfigKey, file)
	}
	var names []string
	for _, p := range cfg.PerNode {
		c := build()
		c.daemonSet = daemonSetFor(p.Name)
		c.selector = map[string]string{LabelDevicePluginConfig: p.Name}
		if file, ok := devicePluginConfig(&p.Sharing); ok {
			c.withConfig(p.Name+".yaml", file)
		}
		names = append(names, p.Name)
		comps = append(comps, c)
	}
	if len(names) > 0 {
		comps[0].affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: LabelDevicePluginConfig, Operator: corev1.NodeSelectorOpNotIn, Values: names}}}},
		}}}
	}
	return comps
}

// devicePluginConfigMap is the ConfigMap of the device plugin's
// configuration files, config.yaml for the default and <name>.yaml for each
// per-node configuration that shares GPUs; nil when there is none.
func devicePluginConfigMap(cp *gpuv1alpha1.ClusterPolicy, s gpuv1alpha1.ClusterPolicySpec, ns string) *corev1.ConfigMap {
	cfg := s.DevicePlugin.Config
	if cfg == nil {
		return nil
	}
	data := map[string]string{}
	if file, ok := devicePluginConfig(cfg.Sharing); ok {
		data[devicePluginConfigKey] = file
	}
	for _, p := range cfg.PerNode {
		if file, ok := devicePluginConfig(&p.Sharing); ok {
			data[p.Name+".yaml"] = file
		}
	}
	if len(data) == 0 {
		return nil
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: cpMeta(cp, DevicePluginConfigMap, ns),
		Data:       data,
	}
}

// DevicePluginDaemonSetFor names the device plugin DaemonSet of the
// per-node configuration name.
func DevicePluginDaemonSetFor(name string) string { return "nvidia-device-plugin-" + name }

// GFDDaemonSetFor names the GPU feature discovery DaemonSet of the
// per-node configuration name: it labels the node with the sharing that
// configuration's device plugin advertises.
func GFDDaemonSetFor(name string) string { return GFDDaemonSet + "-" + name }
