// SPDX-License-Identifier: Apache-2.0

package gpuparity

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	specv1 "github.com/NVIDIA/mig-parted/api/spec/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/apicase"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/crdschema"
)

// Differences are what trainops renders otherwise than the GPU Operator
// does, on purpose, each with its reason: "<the GPU Operator's DaemonSet
// or ServiceAccount>[/<container>]: <what>" → why. docs/gpu-nodes.md
// shows the same table.
var Differences = map[string]string{
	"nvidia-operator-validator: role pods create, get, list, watch, update, patch, delete":                                              "trainops runs no CUDA or plugin workload validation pods: the validator checks the driver and the toolkit only",
	"nvidia-operator-validator: role securitycontextconstraints use":                                                                    "OpenShift's; trainops does not support OpenShift",
	"nvidia-driver: role securitycontextconstraints use":                                                                                "OpenShift's; trainops does not support OpenShift",
	"nvidia-device-plugin: role securitycontextconstraints use":                                                                         "OpenShift's; trainops does not support OpenShift",
	"nvidia-gpu-feature-discovery: role securitycontextconstraints use":                                                                 "OpenShift's; trainops does not support OpenShift",
	"nvidia-dcgm-exporter: role securitycontextconstraints use":                                                                         "OpenShift's; trainops does not support OpenShift",
	"nvidia-mig-manager: role securitycontextconstraints use":                                                                           "OpenShift's; trainops does not support OpenShift",
	"nvidia-driver: clusterrole clusterversions get, list":                                                                              "OpenShift's; trainops does not support OpenShift",
	"nvidia-driver: clusterrole nodes get, list, patch, update, watch":                                                                  "k8s-driver-manager's, which trainops does not run (it cordons and drains the node)",
	"nvidia-driver: clusterrole pods get, list, watch":                                                                                  "k8s-driver-manager's, which trainops does not run (it evicts the node's GPU pods)",
	"nvidia-driver: clusterrole pods/eviction create":                                                                                   "k8s-driver-manager's, which trainops does not run (it evicts the node's GPU pods)",
	"nvidia-driver: clusterrole daemonsets get":                                                                                         "k8s-driver-manager's, which trainops does not run",
	"nvidia-device-plugin: clusterrole nodes get, list, watch":                                                                          "the config-manager sidecar's, which reads the node's config label; trainops runs a DaemonSet per configuration instead",
	"nvidia-gpu-feature-discovery: clusterrole nodes get, list, watch":                                                                  "the config-manager sidecar's, which reads the node's config label; trainops runs a DaemonSet per configuration instead",
	"nvidia-operator-validator: clusterrole nodes get, list, watch":                                                                     "read only by the validations trainops does not run (plugin, MOFED, VM workloads); the driver and toolkit validations do not read the node",
	"nvidia-operator-validator: clusterrole clusterpolicies/finalizers create, get, list, watch, update, patch, delete":                 "the owner references of the CUDA and plugin workload pods, which trainops does not run",
	"nvidia-operator-validator: clusterrole nvidiadrivers/finalizers create, get, list, watch, update, patch, delete":                   "the owner references of the CUDA and plugin workload pods, which trainops does not run",
	"nvidia-container-toolkit: role securitycontextconstraints use":                                                                     "OpenShift's; trainops does not support OpenShift",
	"nvidia-operator-validator: container nvidia-fs-validation":                                                                         "GPUDirect Storage (nvidia-fs) is not part of trainops's ClusterPolicy",
	"nvidia-operator-validator: container cuda-validation":                                                                              "trainops runs no CUDA workload validation pod",
	"nvidia-operator-validator: container plugin-validation":                                                                            "trainops runs no device-plugin workload validation pod",
	"nvidia-driver-daemonset: container k8s-driver-manager":                                                                             "trainops drains the node and evicts its GPU pods itself before it deletes the driver pod (driver.upgradePolicy.autoUpgrade), as the GPU Operator's upgrade controller does; without autoUpgrade an operator drains it",
	"nvidia-driver-daemonset: container nvidia-fs-ctr":                                                                                  "GPUDirect Storage is not part of trainops's ClusterPolicy (the GPU Operator removes it too unless gds.enabled)",
	"nvidia-driver-daemonset: container nvidia-gdrcopy-ctr":                                                                             "GDRCopy is not part of trainops's ClusterPolicy (the GPU Operator removes it too unless gdrcopy.enabled)",
	"nvidia-driver-daemonset: container nvidia-peermem-ctr":                                                                             "GPUDirect RDMA is not part of trainops's ClusterPolicy (the GPU Operator removes it too unless driver.rdma.enabled)",
	"nvidia-driver-daemonset: container openshift-driver-toolkit-ctr":                                                                   "OpenShift's; trainops does not support OpenShift",
	"nvidia-driver-daemonset/nvidia-driver-ctr: mount /run/mellanox/drivers":                                                            "GPUDirect RDMA with a containerised MOFED driver is not part of trainops's ClusterPolicy",
	"nvidia-driver-daemonset/nvidia-driver-ctr: mount /run/mellanox/drivers/usr/src":                                                    "GPUDirect RDMA with a containerised MOFED driver is not part of trainops's ClusterPolicy",
	"nvidia-device-plugin-daemonset: container config-manager":                                                                          "per-node device-plugin configurations are one DaemonSet each in trainops, selected by node label, instead of a sidecar that switches the file",
	"nvidia-device-plugin-daemonset: container config-manager-init":                                                                     "per-node device-plugin configurations are one DaemonSet each in trainops, selected by node label, instead of a sidecar that switches the file",
	"gpu-feature-discovery: container config-manager":                                                                                   "per-node device-plugin configurations are one DaemonSet each in trainops, selected by node label, instead of a sidecar that switches the file",
	"gpu-feature-discovery: container config-manager-init":                                                                              "per-node device-plugin configurations are one DaemonSet each in trainops, selected by node label, instead of a sidecar that switches the file",
	"gpu-feature-discovery/toolkit-validation: mount /run/nvidia":                                                                       "it mounts /run/nvidia/validations, the folder it reads, not all of /run/nvidia (as the device plugin's does)",
	"gpu-feature-discovery/toolkit-validation: extra mount /run/nvidia/validations from the node's /run/nvidia/validations":             "it mounts /run/nvidia/validations, the folder it reads, not all of /run/nvidia (as the device plugin's does)",
	"nvidia-dcgm-exporter/toolkit-validation: mount /run/nvidia":                                                                        "it mounts /run/nvidia/validations, the folder it reads, not all of /run/nvidia (as the device plugin's does)",
	"nvidia-dcgm-exporter/toolkit-validation: extra mount /run/nvidia/validations from the node's /run/nvidia/validations":              "it mounts /run/nvidia/validations, the folder it reads, not all of /run/nvidia (as the device plugin's does)",
	"nvidia-mig-manager/toolkit-validation: args":                                                                                       "the same wait for toolkit-ready as the other components'; only its log line differs",
	"nvidia-container-toolkit-daemonset/driver-validation: args":                                                                        driverWait,
	"nvidia-operator-validator/driver-validation: args":                                                                                 driverWait,
	"nvidia-container-toolkit-daemonset/nvidia-container-toolkit-ctr: extra env ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": strictRuntime,
	"nvidia-container-toolkit-daemonset/nvidia-container-toolkit-ctr: extra env ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS":         strictRuntime,
	"nvidia-device-plugin-daemonset/nvidia-device-plugin: env DEVICE_LIST_STRATEGY=volume-mounts":                                       strictPlugin,
	"nvidia-device-plugin-daemonset/nvidia-device-plugin: env DEVICE_LIST_STRATEGY=volume-mounts,cdi-annotations":                       strictPlugin,
	"nvidia-device-plugin-daemonset/nvidia-device-plugin: env CONFIG_FILE":                                                              noDefaultFile,
	"gpu-feature-discovery/gpu-feature-discovery: env CONFIG_FILE":                                                                      noDefaultFile,
	"nvidia-device-plugin-daemonset/nvidia-device-plugin: env CONFIG_FILE=/config/shared-4.yaml":                                        ownFile,
	"gpu-feature-discovery/gpu-feature-discovery: env CONFIG_FILE=/config/shared-4.yaml":                                                ownFile,
	"nvidia-container-toolkit-daemonset/nvidia-container-toolkit-ctr: args":                                                             "the GPU Operator's entrypoint.sh ConfigMap, inlined as the script bash runs (TestEntrypointsMatchUpstream holds it to that file)",
	"nvidia-device-plugin-daemonset/nvidia-device-plugin: args":                                                                         "the GPU Operator's entrypoint.sh ConfigMap, inlined as the script bash runs (TestEntrypointsMatchUpstream holds it to that file)",
	"nvidia-mig-manager/nvidia-mig-manager: args":                                                                                       "the GPU Operator's entrypoint.sh ConfigMap, inlined as the script bash runs (TestEntrypointsMatchUpstream holds it to that file)",
}

// The reasons shared by several rows of Differences.
const (
	driverWait    = "trainops's own wait for the driver container's .driver-ctr-ready before nvidia-validator: the validator waits for it only when the driver DaemonSet's owner is the GPU Operator's (nvidia.com), and trainops's is gpu.trainops.dev's (TestDriverValidationWaitsForTheDriverContainer)"
	strictRuntime = "containerRuntime.isolation Strict, the default: the runtime ignores NVIDIA_VISIBLE_DEVICES from unprivileged containers and reads the device plugin's volume mounts, so a pod without a GPU limit gets no GPU; isolation Envvar keeps the GPU Operator's default"
	noDefaultFile = "with per-node configurations but no default sharing, the DaemonSet for nodes without a configuration label reads no file: the program's own defaults, no sharing"
	ownFile       = "each per-node configuration is a DaemonSet of its own that reads its file of the ConfigMap, <name>.yaml, where the GPU Operator's config manager copies the node's file to /config/config.yaml"
	strictPlugin  = "containerRuntime.isolation Strict, the default: the device plugin hands devices over as volume mounts, the one way the runtime then accepts; isolation Envvar keeps the GPU Operator's envvar"
)

var (
	upstreamOnce sync.Once
	upstreamDir  string
	upstreamErr  error
)

// upstream is the folder of GPUOperatorModule, downloaded through the Go
// module proxy when the module cache lacks it.
func upstream(t *testing.T) string {
	t.Helper()
	upstreamOnce.Do(func() {
		out, err := exec.Command("go", "mod", "download", "-json", builder.GPUOperatorModule).Output()
		if err != nil {
			upstreamErr = err
			return
		}
		var m struct{ Dir, Error string }
		if upstreamErr = json.Unmarshal(out, &m); upstreamErr == nil && m.Error != "" {
			upstreamErr = &os.PathError{Op: "download", Path: builder.GPUOperatorModule, Err: os.ErrNotExist}
		}
		upstreamDir = m.Dir
	})
	if upstreamErr != nil {
		t.Fatalf("download %s: %v", builder.GPUOperatorModule, upstreamErr)
	}
	return upstreamDir
}

// asset decodes the GPU Operator's manifest at path (under assets/) into
// out.
func asset(t *testing.T, path string, out any) {
	t.Helper()
	readYAML(t, filepath.Join(upstream(t), "assets", path), out)
}

// readYAML decodes the YAML file path into out.
func readYAML(t *testing.T, path string, out any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// clusterPolicy is the ClusterPolicy of testdata/api/valid/<name>.yaml,
// defaulted as the API server defaults it.
func clusterPolicy(t *testing.T, name string) *gpuv1alpha1.ClusterPolicy {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "testdata", "api", "valid")
	cases, err := apicase.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := crdschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if filepath.Base(c.Path) != name+".yaml" {
			continue
		}
		u := c.Objects[len(c.Objects)-1]
		if err := s.Default(u); err != nil {
			t.Fatal(err)
		}
		cp := &gpuv1alpha1.ClusterPolicy{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cp); err != nil {
			t.Fatal(err)
		}
		return cp
	}
	t.Fatalf("no case %s in %s", name, dir)
	return nil
}

// built is the object of type T named name among cp's children.
func built[T client.Object](t *testing.T, cp *gpuv1alpha1.ClusterPolicy, name string) T {
	t.Helper()
	for _, o := range builder.ForClusterPolicy(cp, builder.OfflineGPUNodes).Objects {
		if v, ok := o.(T); ok && o.GetName() == name {
			return v
		}
	}
	var zero T
	t.Fatalf("trainops builds no %T %s", zero, name)
	return zero
}

// differs reports whether key is a listed difference.
func differs(key string) bool { _, ok := Differences[key]; return ok }

// TestMIGLayoutsParseWithMigParted: the MIG layouts trainops writes for
// the MIG manager parse with mig-parted's own v1 spec, which refuses an
// enabled layout without mig-devices.
func TestMIGLayoutsParseWithMigParted(t *testing.T) {
	cp := clusterPolicy(t, "clusterpolicy-mig")
	cp.Spec.MIGManager.Profiles = append(cp.Spec.MIGManager.Profiles, gpuv1alpha1.MIGProfile{Name: "all-1g.10gb", Devices: map[string]int32{"1g.10gb": 7}})
	cm := built[*corev1.ConfigMap](t, cp, builder.MIGPartedConfigMap)
	var spec specv1.Spec
	raw, err := yaml.YAMLToJSON([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("mig-parted refuses trainops's layouts: %v\n%s", err, cm.Data["config.yaml"])
	}
	for _, name := range []string{"all-disabled", "all-enabled", "all-1g.10gb"} {
		if len(spec.MigConfigs[name]) == 0 {
			t.Errorf("no layout %s", name)
		}
	}
	if got := spec.MigConfigs["all-1g.10gb"][0].MigDevices["1g.10gb"]; got != 7 {
		t.Errorf("all-1g.10gb has %d 1g.10gb instances, want 7", got)
	}
}

// rbacOf is what the ServiceAccount sa may do, from objs: the rules of the
// Roles and of the ClusterRoles bound to it. clusterRole gives the rules of
// a ClusterRole objs do not hold.
func rbacOf(objs []client.Object, sa string, clusterRole func(string) []rbacv1.PolicyRule) (role, cluster []rbacv1.PolicyRule) {
	bound := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool { return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa })
	}
	rules := func(kind, name string) []rbacv1.PolicyRule {
		for _, o := range objs {
			switch r := o.(type) {
			case *rbacv1.Role:
				if kind == "Role" && r.Name == name {
					return r.Rules
				}
			case *rbacv1.ClusterRole:
				if kind == "ClusterRole" && r.Name == name {
					return r.Rules
				}
			}
		}
		if kind == "ClusterRole" && clusterRole != nil {
			return clusterRole(name)
		}
		return nil
	}
	for _, o := range objs {
		switch b := o.(type) {
		case *rbacv1.RoleBinding:
			if bound(b.Subjects) {
				role = append(role, rules(b.RoleRef.Kind, b.RoleRef.Name)...)
			}
		case *rbacv1.ClusterRoleBinding:
			if bound(b.Subjects) {
				cluster = append(cluster, rules(b.RoleRef.Kind, b.RoleRef.Name)...)
			}
		}
	}
	return role, cluster
}

// upstreamRBAC is the GPU Operator's RBAC manifests of a component folder
// (under assets/), as objects.
func upstreamRBAC(t *testing.T, folder string) []client.Object {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(upstream(t), "assets", folder, "*role*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no RBAC in assets/%s: %v", folder, err)
	}
	var out []client.Object
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var kind struct{ Kind string }
		if err := yaml.Unmarshal(raw, &kind); err != nil {
			t.Fatal(err)
		}
		var o client.Object
		switch kind.Kind {
		case "Role":
			o = &rbacv1.Role{}
		case "ClusterRole":
			o = &rbacv1.ClusterRole{}
		case "RoleBinding":
			o = &rbacv1.RoleBinding{}
		case "ClusterRoleBinding":
			o = &rbacv1.ClusterRoleBinding{}
		default:
			continue
		}
		if err := yaml.Unmarshal(raw, o); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, o)
	}
	return out
}

// installedClusterRole is a ClusterRole installed with trainops (config/rbac),
// by name.
func installedClusterRole(t *testing.T) func(string) []rbacv1.PolicyRule {
	return func(name string) []rbacv1.PolicyRule {
		files, _ := filepath.Glob(filepath.Join("..", "..", "..", "config", "rbac", "*.yaml"))
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var cr rbacv1.ClusterRole
			if yaml.Unmarshal(raw, &cr) == nil && cr.Kind == "ClusterRole" && cr.Name == name {
				return cr.Rules
			}
		}
		t.Errorf("no ClusterRole %s installed with trainops (config/rbac)", name)
		return nil
	}
}

// TestRBACMatchesUpstream: each component's ServiceAccount may do, in the
// GPU namespace and cluster-wide, every thing the GPU Operator's Roles and
// ClusterRoles for it allow, verb by verb, unless Differences says why
// not, and nothing more.
func TestRBACMatchesUpstream(t *testing.T) {
	objs := builder.ForClusterPolicy(clusterPolicy(t, "clusterpolicy-mig"), builder.OfflineGPUNodes).Objects
	seen := map[string]bool{}
	for _, c := range []struct{ folder, sa string }{
		{"state-driver", "nvidia-driver"},
		{"state-container-toolkit", "nvidia-container-toolkit"},
		{"state-operator-validation", "nvidia-operator-validator"},
		{"state-device-plugin", "nvidia-device-plugin"},
		{"gpu-feature-discovery", "nvidia-gpu-feature-discovery"},
		{"state-dcgm-exporter", "nvidia-dcgm-exporter"},
		{"state-mig-manager", "nvidia-mig-manager"},
	} {
		upRole, upCluster := rbacOf(upstreamRBAC(t, c.folder), c.sa, nil)
		if len(upRole)+len(upCluster) == 0 {
			t.Fatalf("%s: the GPU Operator grants %s nothing: wrong name?", c.folder, c.sa)
		}
		ours, oursCluster := rbacOf(objs, c.sa, installedClusterRole(t))
		for _, scope := range []struct {
			name     string
			up, ours []rbacv1.PolicyRule
		}{{"role", upRole, ours}, {"clusterrole", upCluster, oursCluster}} {
			for _, r := range scope.up {
				for _, res := range r.Resources {
					key := fmt.Sprintf("%s: %s %s %s", c.sa, scope.name, res, strings.Join(r.Verbs, ", "))
					seen[key] = true
					if !grants(scope.ours, r.APIGroups, res, r.Verbs) && !differs(key) {
						t.Errorf("%s: the GPU Operator's %s grants %s %v on %s; trainops's does not, and Differences does not say why", c.sa, scope.name, r.APIGroups, r.Verbs, res)
					}
				}
			}
			for _, r := range scope.ours {
				for _, res := range r.Resources {
					if !grants(scope.up, r.APIGroups, res, r.Verbs) {
						t.Errorf("%s: trainops's %s grants %v on %s, more than the GPU Operator's", c.sa, scope.name, r.Verbs, res)
					}
				}
			}
		}
	}
	for k := range Differences {
		if rbacKey(k) && !seen[k] {
			t.Errorf("Differences lists %q, which the GPU Operator's RBAC does not hold: remove it", k)
		}
	}
}

// grants reports whether rules allow every verb on resource of groups.
func grants(rules []rbacv1.PolicyRule, groups []string, resource string, verbs []string) bool {
	for _, v := range verbs {
		ok := slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, v) &&
				slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(r.APIGroups, g) })
		})
		if !ok {
			return false
		}
	}
	return true
}

// TestDocsListTheDifferences: docs/gpu-nodes.md's table lists every
// entry of Differences, with its reason, and no other.
func TestDocsListTheDifferences(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "gpu-nodes.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(string(raw), "\n") {
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		if len(cells) == 3 && cells[0] != "where" && !strings.HasPrefix(cells[0], "---") {
			rows[cells[0]+": "+cells[1]] = cells[2]
		}
	}
	for k, why := range Differences {
		if rows[k] != why {
			t.Errorf("docs/gpu-nodes.md: row %q says %q, want %q", k, rows[k], why)
		}
	}
	for k := range rows {
		if !differs(k) {
			t.Errorf("docs/gpu-nodes.md lists %q, which Differences does not", k)
		}
	}
}

// ubuntuDriver is the driver DaemonSet built for builder.OfflineGPUNodes.
var ubuntuDriver = builder.DriverDaemonSetFor(builder.OfflineGPUNodes.OS[0])
