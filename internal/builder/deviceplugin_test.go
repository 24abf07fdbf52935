// SPDX-License-Identifier: Apache-2.0

package builder_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// configField is one key of the device plugin's config format.
type configField struct {
	Type     string   `json:"type"`
	Required bool     `json:"required"`
	Values   []string `json:"values"`
	Min      *int64   `json:"min"`
	MinItems int      `json:"minItems"`
}

// checkFormat walks v (at path p) against the format's fields and returns
// every difference.
func checkFormat(fields map[string]configField, p string, v any) []string {
	var out []string
	f, known := fields[p]
	if p != "" && !known && !strings.HasSuffix(p, "[]") {
		return []string{p + ": not a key of the device plugin's config"}
	}
	switch x := v.(type) {
	case map[string]any:
		if p != "" && known && f.Type != "object" && f.Type != "any" {
			out = append(out, fmt.Sprintf("%s: an object, the format has %s", p, f.Type))
		}
		for k, child := range x {
			out = append(out, checkFormat(fields, join(p, k), child)...)
		}
		// Required keys of this object.
		for name, cf := range fields {
			if parent, key, ok := cutLast(name); ok && parent == p && cf.Required {
				if _, has := x[key]; !has {
					out = append(out, name+": required, missing")
				}
			}
		}
	case []any:
		if f.Type != "list" {
			out = append(out, fmt.Sprintf("%s: a list, the format has %s", p, f.Type))
		}
		if len(x) < f.MinItems {
			out = append(out, fmt.Sprintf("%s: %d items, at least %d", p, len(x), f.MinItems))
		}
		for _, item := range x {
			out = append(out, checkFormat(fields, p+"[]", item)...)
		}
	case string:
		if f.Type != "string" && f.Type != "any" {
			out = append(out, fmt.Sprintf("%s: a string, the format has %s", p, f.Type))
		}
		if len(f.Values) > 0 && !slices.Contains(f.Values, x) {
			out = append(out, fmt.Sprintf("%s: %q, the format allows %v", p, x, f.Values))
		}
	case bool:
		if f.Type != "bool" && f.Type != "any" {
			out = append(out, fmt.Sprintf("%s: a bool, the format has %s", p, f.Type))
		}
	case float64:
		if f.Type != "int" && f.Type != "any" || x != float64(int64(x)) {
			out = append(out, fmt.Sprintf("%s: %v, the format has %s", p, x, f.Type))
		}
		if f.Min != nil && int64(x) < *f.Min {
			out = append(out, fmt.Sprintf("%s: %v, at least %d", p, x, *f.Min))
		}
	default:
		out = append(out, fmt.Sprintf("%s: %T", p, v))
	}
	return out
}

func join(p, k string) string {
	if p == "" {
		return k
	}
	return p + "." + k
}

// cutLast splits "a.b[].c" into "a.b[]" and "c".
func cutLast(name string) (string, string, bool) {
	i := strings.LastIndex(name, ".")
	if i < 0 {
		return "", name, true
	}
	return name[:i], name[i+1:], true
}

// TestDevicePluginConfigFormat: the time-slicing file trainops writes is
// one the device plugin (v0.17.0) reads: only its keys, with their types,
// its required keys, at least 2 replicas; and the plugin is told where it
// is (CONFIG_FILE, mounted from the ConfigMap).
func TestDevicePluginConfigFormat(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "gpu-operator", "device-plugin-config-v1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var format struct {
		Fields map[string]configField `json:"fields"`
	}
	if err := yaml.UnmarshalStrict(b, &format); err != nil {
		t.Fatal(err)
	}
	var cp gpuv1alpha1.ClusterPolicy
	load(t, filepath.Join(seeds, "gpu-cluster-config.yaml"), &cp)
	ts := cp.Spec.DevicePlugin.Config.Sharing.TimeSlicing
	ts.RenameByDefault, ts.FailRequestsGreaterThanOne = true, true
	ts.Resources = append(ts.Resources, gpuv1alpha1.TimeSlicingResource{Name: "nvidia.com/mig-1g.10gb", Replicas: 2})
	c := builder.ForClusterPolicy(&cp, builder.OfflineGPUNodes)
	var cm *corev1.ConfigMap
	for _, o := range c.Objects {
		if m, ok := o.(*corev1.ConfigMap); ok && m.Name == builder.DevicePluginConfigMap {
			cm = m
		}
	}
	if cm == nil || len(cm.Data) != 1 {
		t.Fatalf("device plugin ConfigMap %v", cm)
	}
	var file map[string]any
	for key, data := range cm.Data {
		if err := yaml.Unmarshal([]byte(data), &file); err != nil {
			t.Fatal(err)
		}
		// The plugin is pointed at this key of the mounted ConfigMap.
		dp := daemonSetOf(t, c, builder.DevicePluginDaemonSet).Spec.Template.Spec
		ctr := dp.Containers[0]
		cfgFile := ""
		for _, e := range ctr.Env {
			if e.Name == "CONFIG_FILE" {
				cfgFile = e.Value
			}
		}
		mounted := false
		for _, vm := range ctr.VolumeMounts {
			for _, v := range dp.Volumes {
				if v.Name == vm.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && filepath.Join(vm.MountPath, key) == cfgFile {
					mounted = true
				}
			}
		}
		if !mounted {
			t.Errorf("CONFIG_FILE=%q is not key %s of ConfigMap %s as mounted", cfgFile, key, cm.Name)
		}
	}
	problems := checkFormat(format.Fields, "", file)
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}

	// A per-node configuration: its own file in the format, its own
	// DaemonSet on the nodes labelled for it, and the default kept off
	// them.
	cp.Spec.DevicePlugin.Config.PerNode = []gpuv1alpha1.NamedDevicePluginConfig{{Name: "shared-8", Sharing: gpuv1alpha1.SharingSpec{
		TimeSlicing: &gpuv1alpha1.TimeSlicingSpec{Resources: []gpuv1alpha1.TimeSlicingResource{{Name: "nvidia.com/gpu", Replicas: 8}}}}}}
	c = builder.ForClusterPolicy(&cp, builder.OfflineGPUNodes)
	for _, o := range c.Objects {
		if m, ok := o.(*corev1.ConfigMap); ok && m.Name == builder.DevicePluginConfigMap {
			cm = m
		}
	}
	if len(cm.Data) != 2 || cm.Data["shared-8.yaml"] == "" {
		t.Fatalf("ConfigMap keys %v, want config.yaml and shared-8.yaml", keys(cm.Data))
	}
	var perNode map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["shared-8.yaml"]), &perNode); err != nil {
		t.Fatal(err)
	}
	for _, p := range checkFormat(format.Fields, "", perNode) {
		t.Error("shared-8.yaml: " + p)
	}
	named := daemonSetOf(t, c, builder.DevicePluginDaemonSetFor("shared-8")).Spec.Template.Spec
	if named.NodeSelector[builder.LabelDevicePluginConfig] != "shared-8" || named.NodeSelector[builder.DeployLabel(builder.ComponentDevicePlugin)] != "true" {
		t.Errorf("per-node plugin nodeSelector %v", named.NodeSelector)
	}
	if !slices.Contains(named.Containers[0].Env, corev1.EnvVar{Name: "CONFIG_FILE", Value: "/config/shared-8.yaml"}) {
		t.Errorf("per-node plugin env %v", named.Containers[0].Env)
	}
	def := daemonSetOf(t, c, builder.DevicePluginDaemonSet).Spec.Template.Spec
	req := def.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0]
	if req.Key != builder.LabelDevicePluginConfig || req.Operator != corev1.NodeSelectorOpNotIn || !slices.Equal(req.Values, []string{"shared-8"}) {
		t.Errorf("default plugin affinity %+v", req)
	}
	if !slices.Contains(c.DaemonSets, builder.DevicePluginDaemonSetFor("shared-8")) {
		t.Errorf("status would not count the per-node plugin: %v", c.DaemonSets)
	}
	// The check can fail: a key the plugin does not know, and too few
	// replicas, are caught.
	bad := map[string]any{"version": "v1", "sharing": map[string]any{"timeSlicing": map[string]any{"replicas": 4.0, "resources": []any{map[string]any{"name": "nvidia.com/gpu", "replicas": 1.0}}}}}
	if got := checkFormat(format.Fields, "", bad); len(got) != 2 {
		t.Errorf("a wrong file gave %v, want 2 problems", got)
	}
}
