// SPDX-License-Identifier: Apache-2.0

package builder_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/install"
)

// TestMIGManagerCanWork: the MIG manager gets what it needs on a real
// node: its layouts in mig-parted's v1 format (the two every node has and
// the ClusterPolicy's profiles), the GPU clients to stop, and RBAC to
// label its node (the GPU Operator's ClusterRole: nodes get, list, watch,
// update, patch) and to restart the GPU pods of its namespace; no wildcard.
func TestMIGManagerCanWork(t *testing.T) {
	cp := fullStack(t)
	cp.Spec.MIGManager.Profiles = []gpuv1alpha1.MIGProfile{{Name: "all-1g.10gb", Devices: map[string]int32{"1g.10gb": 7}}}
	c := builder.ForClusterPolicy(cp, builder.OfflineGPUNodes)
	objs := map[string]any{}
	for _, o := range c.Objects {
		objs[o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName()] = o
	}
	if cr, ok := objs["ClusterRole/"+builder.MIGManagerRBAC]; ok {
		t.Fatalf("trainops builds ClusterRole %v: the MIG manager's is installed with trainops", cr)
	}
	installed, err := install.ClusterRole(builder.MIGManagerClusterRole)
	if err != nil {
		t.Fatal(err)
	}
	if len(installed.Rules) != 1 || !slices.Equal(installed.Rules[0].Resources, []string{"nodes"}) || !slices.Equal(installed.Rules[0].Verbs, []string{"get", "list", "watch", "update", "patch"}) {
		t.Fatalf("installed ClusterRole %+v", installed)
	}
	crb, ok := objs["ClusterRoleBinding/"+builder.MIGManagerRBAC].(*rbacv1.ClusterRoleBinding)
	if !ok || crb.RoleRef.Name != installed.Name || len(crb.Subjects) != 1 || crb.Subjects[0].Name != "nvidia-mig-manager" || crb.Subjects[0].Namespace != "gpu-operator" {
		t.Fatalf("ClusterRoleBinding %+v", crb)
	}
	role, ok := objs["Role/"+builder.MIGManagerRBAC].(*rbacv1.Role)
	if !ok || role.Namespace != "gpu-operator" || !slices.Equal(role.Rules[0].Resources, []string{"pods"}) {
		t.Fatalf("Role %+v", role)
	}
	if _, ok := objs["RoleBinding/"+builder.MIGManagerRBAC]; !ok {
		t.Fatal("no RoleBinding")
	}
	for _, r := range append(installed.Rules, role.Rules...) {
		if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") {
			t.Errorf("wildcard in %+v", r)
		}
	}
	parted := objs["ConfigMap/"+builder.MIGPartedConfigMap].(*corev1.ConfigMap).Data["config.yaml"]
	var f struct {
		Version    string `json:"version"`
		MIGConfigs map[string][]struct {
			Devices    string           `json:"devices"`
			MIGEnabled bool             `json:"mig-enabled"`
			MIGDevices map[string]int32 `json:"mig-devices"`
		} `json:"mig-configs"`
	}
	if err := yaml.UnmarshalStrict([]byte(parted), &f); err != nil {
		t.Fatalf("mig-parted config: %v\n%s", err, parted)
	}
	if f.Version != "v1" || len(f.MIGConfigs) != 3 || f.MIGConfigs["all-disabled"][0].MIGEnabled || !f.MIGConfigs["all-enabled"][0].MIGEnabled ||
		f.MIGConfigs["all-1g.10gb"][0].MIGDevices["1g.10gb"] != 7 || f.MIGConfigs["all-1g.10gb"][0].Devices != "all" {
		t.Errorf("mig-parted config %+v", f)
	}
	clients := objs["ConfigMap/"+builder.GPUClientsConfigMap].(*corev1.ConfigMap).Data["clients.yaml"]
	var cf struct {
		Version         string   `json:"version"`
		SystemdServices []string `json:"systemd-services"`
	}
	if err := yaml.UnmarshalStrict([]byte(clients), &cf); err != nil || cf.Version != "v1" || !slices.Contains(cf.SystemdServices, "nvidia-dcgm.service") {
		t.Errorf("gpu clients %v %+v", err, cf)
	}
	// The DaemonSet reads both from where its environment says.
	ps := daemonSetOf(t, c, builder.MIGManagerDaemonSet).Spec.Template.Spec
	for _, want := range []struct{ cm, path string }{{builder.MIGPartedConfigMap, "/mig-parted-config"}, {builder.GPUClientsConfigMap, "/gpu-clients"}} {
		found := false
		for _, v := range ps.Volumes {
			for _, m := range ps.Containers[0].VolumeMounts {
				found = found || v.ConfigMap != nil && v.ConfigMap.Name == want.cm && m.Name == v.Name && m.MountPath == want.path
			}
		}
		if !found {
			t.Errorf("ConfigMap %s not mounted at %s", want.cm, want.path)
		}
	}
	// Without the MIG manager, none of it.
	cp.Spec.MIGManager.Enabled = false
	for _, o := range builder.ForClusterPolicy(cp, builder.OfflineGPUNodes).Objects {
		if o.GetName() == builder.MIGManagerRBAC || o.GetName() == builder.MIGPartedConfigMap {
			t.Errorf("%T %s built with the MIG manager off", o, o.GetName())
		}
	}
}
