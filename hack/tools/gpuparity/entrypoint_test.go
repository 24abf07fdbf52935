// SPDX-License-Identifier: Apache-2.0

package gpuparity

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/internal/builder"
)

// entrypointOf is the entrypoint.sh of the GPU Operator's ConfigMap
// named name, among the manifests of folder (under assets/).
func entrypointOf(t *testing.T, folder, name string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(upstream(t), "assets", folder, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cm corev1.ConfigMap
		if yaml.Unmarshal(raw, &cm) == nil && cm.Kind == "ConfigMap" && cm.Name == name {
			return cm.Data["entrypoint.sh"]
		}
	}
	t.Fatalf("no ConfigMap %s in assets/%s", name, folder)
	return ""
}

// statements are a shell script's commands in order, without comments,
// log lines (echo, cat) or blank ones: `until [[ -f x ]]` and `until [ -f
// x ]` read alike, as do a newline and "; ".
func statements(script string) []string {
	var out []string
	for _, line := range strings.Split(script, "\n") {
		for _, st := range strings.Split(line, ";") {
			st = strings.TrimSpace(st)
			if rest, ok := strings.CutPrefix(st, "do "); ok {
				out = append(out, "do")
				st = rest
			}
			st = strings.NewReplacer("[[ ", "[ ", " ]]", " ]").Replace(st)
			if st == "" || strings.HasPrefix(st, "#") || strings.HasPrefix(st, "echo ") || strings.HasPrefix(st, "cat ") {
				continue
			}
			out = append(out, st)
		}
	}
	return out
}

// TestEntrypointsMatchUpstream: the script each component starts with is
// the GPU Operator's entrypoint.sh for it, statement by statement: the
// wait for driver-ready, the export of what it says, the toolkit's delay
// after a containerd restart, the MIG manager's extra variable, and the
// program it execs.
func TestEntrypointsMatchUpstream(t *testing.T) {
	cp := clusterPolicy(t, "clusterpolicy-mig")
	for _, c := range []struct{ folder, configMap, daemonSet, container string }{
		{"state-container-toolkit", "nvidia-container-toolkit-entrypoint", builder.ToolkitDaemonSet, "nvidia-container-toolkit-ctr"},
		{"state-device-plugin", "nvidia-device-plugin-entrypoint", builder.DevicePluginDaemonSet, "nvidia-device-plugin"},
		{"state-mig-manager", "nvidia-mig-manager-entrypoint", builder.MIGManagerDaemonSet, "nvidia-mig-manager"},
	} {
		want := statements(entrypointOf(t, c.folder, c.configMap))
		if !slices.ContainsFunc(want, regexp.MustCompile(`^exec \S+$`).MatchString) {
			t.Fatalf("%s: no exec in the GPU Operator's entrypoint: %v", c.configMap, want)
		}
		ps := built[*appsv1.DaemonSet](t, cp, c.daemonSet).Spec.Template.Spec
		i := slices.IndexFunc(ps.Containers, func(x corev1.Container) bool { return x.Name == c.container })
		if i < 0 || len(ps.Containers[i].Args) != 1 {
			t.Fatalf("%s: no container %s with a script", c.daemonSet, c.container)
		}
		if got := statements(ps.Containers[i].Args[0]); !slices.Equal(got, want) {
			t.Errorf("%s: starts with\n  %q\nthe GPU Operator's %s:\n  %q", c.daemonSet, got, c.configMap, want)
		}
	}
}
