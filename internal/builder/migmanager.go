// SPDX-License-Identifier: Apache-2.0

package builder

import (
	"maps"
	"sort"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
)

// Objects of the MIG manager besides its DaemonSet.
const (
	// MIGPartedConfigMap holds the MIG layouts (mig-parted's config.yaml).
	MIGPartedConfigMap = "default-mig-parted-config"
	// GPUClientsConfigMap lists the host's systemd services that use the
	// GPUs, which the MIG manager stops while it repartitions.
	GPUClientsConfigMap = "default-gpu-clients"
	// MIGManagerRBAC names the Role and the two bindings that let the MIG
	// manager read and label its node (nvidia.com/mig.config,
	// nvidia.com/mig.config.state) and delete the GPU pods it must restart.
	MIGManagerRBAC = "nvidia-mig-manager"
	// MIGManagerClusterRole is the MIG manager's access to nodes, installed
	// with trainops (config/rbac/mig_manager_role.yaml) and bound by the
	// ClusterRoleBinding MIGManagerRBAC. trainops does not create it: it
	// holds `bind` on this one ClusterRole instead of every permission in it.
	MIGManagerClusterRole = "trainops-mig-manager"
	// LabelMIGConfig is the node label that picks a node's MIG layout.
	LabelMIGConfig = "nvidia.com/mig.config"
)

// gpuClientServices are the host services the GPU Operator's
// default-gpu-clients lists: NVIDIA's system management and DCGM.
var gpuClientServices = []string{
	"nvsm.service", "nvsm-mqtt.service", "nvsm-core.service", "nvsm-api-gateway.service", "nvsm-notifier.service",
	"nv_peer_mem.service", "nvidia-dcgm.service", "dcgm.service", "dcgm-exporter.service",
}

// migPartedFile is mig-parted's configuration, format version v1.
type migPartedFile struct {
	Version    string                       `json:"version"`
	MIGConfigs map[string][]migPartedDevice `json:"mig-configs"`
}

// migPartedDevice is the layout of the GPUs a mig-parted entry selects.
// mig-parted requires mig-devices, empty or not, when mig-enabled is true,
// and refuses it otherwise: a pointer tells an empty layout from none.
type migPartedDevice struct {
	Devices    string            `json:"devices"`
	MIGEnabled bool              `json:"mig-enabled"`
	MIGDevices *map[string]int32 `json:"mig-devices,omitempty"`
}

// migPartedConfig renders the layouts: all-disabled, all-enabled, and
// each of the ClusterPolicy's profiles, on every GPU of the node.
func migPartedConfig(s gpuv1alpha1.ClusterPolicySpec) string {
	f := migPartedFile{Version: "v1", MIGConfigs: map[string][]migPartedDevice{
		"all-disabled": {{Devices: "all", MIGEnabled: false}},
		"all-enabled":  {{Devices: "all", MIGEnabled: true, MIGDevices: &map[string]int32{}}},
	}}
	for _, p := range s.MIGManager.Profiles {
		devices := maps.Clone(p.Devices)
		if devices == nil {
			devices = map[string]int32{}
		}
		f.MIGConfigs[p.Name] = []migPartedDevice{{Devices: "all", MIGEnabled: true, MIGDevices: &devices}}
	}
	return mustYAML(f)
}

// gpuClientsConfig renders the GPU clients file, format version v1.
func gpuClientsConfig() string {
	services := append([]string(nil), gpuClientServices...)
	sort.Strings(services)
	return mustYAML(struct {
		Version         string   `json:"version"`
		SystemdServices []string `json:"systemd-services"`
	}{"v1", services})
}

func mustYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		// Plain structs of strings, booleans and integers always marshal.
		panic(err)
	}
	return string(b)
}

// migManagerObjects are the MIG manager's ConfigMaps and RBAC: it reads
// its node's nvidia.com/mig.config label and writes the
// nvidia.com/mig.config.state label and the paused deploy labels (nodes,
// cluster-wide, through the installed ClusterRole MIGManagerClusterRole),
// and deletes the GPU pods of its namespace that must restart on the new
// layout (a Role trainops may grant because it holds the same access).
func migManagerObjects(cp *gpuv1alpha1.ClusterPolicy, ns string) []client.Object {
	s := cp.Spec
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "nvidia-mig-manager", Namespace: ns}}
	return []client.Object{
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: cpMeta(cp, MIGManagerRBAC, ""),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: MIGManagerClusterRole},
			Subjects:   subject,
		},
		&rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: cpMeta(cp, MIGManagerRBAC, ns),
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "delete"}}},
		},
		&rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: cpMeta(cp, MIGManagerRBAC, ns),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: MIGManagerRBAC},
			Subjects:   subject,
		},
		&corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: cpMeta(cp, MIGPartedConfigMap, ns),
			Data:       map[string]string{"config.yaml": migPartedConfig(s)},
		},
		&corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: cpMeta(cp, GPUClientsConfigMap, ns),
			Data:       map[string]string{"clients.yaml": gpuClientsConfig()},
		},
	}
}
