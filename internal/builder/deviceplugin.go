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

// devicePlugins builds the device plugin DaemonSets and the ConfigMap of
// their configuration files (nil when there is none). Each per-node
// configuration runs as its own DaemonSet on the nodes labelled
// nvidia.com/device-plugin.config=<name>; the default one runs on every
// other GPU node. Moving a node from one configuration to another is
// relabelling it: its plugin pod is replaced by the other DaemonSet's.
func devicePlugins(cp *gpuv1alpha1.ClusterPolicy, s gpuv1alpha1.ClusterPolicySpec, ns string) ([]component, *corev1.ConfigMap) {
	data := map[string]string{}
	def := devicePluginComponent(s)
	comps := []component{def}
	var names []string
	if cfg := s.DevicePlugin.Config; cfg != nil {
		if file, ok := devicePluginConfig(cfg.Sharing); ok {
			data[devicePluginConfigKey] = file
			comps[0].withConfig(devicePluginConfigKey, file)
		}
		for _, p := range cfg.PerNode {
			c := devicePluginComponent(s)
			c.daemonSet = DevicePluginDaemonSetFor(p.Name)
			c.selector = map[string]string{LabelDevicePluginConfig: p.Name}
			if file, ok := devicePluginConfig(&p.Sharing); ok {
				key := p.Name + ".yaml"
				data[key] = file
				c.withConfig(key, file)
			}
			names = append(names, p.Name)
			comps = append(comps, c)
		}
	}
	if len(names) > 0 {
		comps[0].affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: LabelDevicePluginConfig, Operator: corev1.NodeSelectorOpNotIn, Values: names}}}},
		}}}
	}
	if len(data) == 0 {
		return comps, nil
	}
	return comps, &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: cpMeta(cp, DevicePluginConfigMap, ns),
		Data:       data,
	}
}

// DevicePluginDaemonSetFor names the device plugin DaemonSet of the
// per-node configuration name.
func DevicePluginDaemonSetFor(name string) string { return "nvidia-device-plugin-" + name }
