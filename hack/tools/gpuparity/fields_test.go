// SPDX-License-Identifier: Apache-2.0

package gpuparity

import (
	"fmt"
	"go/ast"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	gpuv1 "github.com/NVIDIA/gpu-operator/api/nvidia/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// components pairs each of the GPU Operator's DaemonSet manifests with the
// DaemonSet trainops builds for the same component.
var components = []struct{ asset, daemonSet string }{
	{"state-driver/0500_daemonset.yaml", ubuntuDriver},
	{"state-container-toolkit/0500_daemonset.yaml", builder.ToolkitDaemonSet},
	{"state-operator-validation/0500_daemonset.yaml", builder.ValidatorDaemonSet},
	{"state-device-plugin/0500_daemonset.yaml", builder.DevicePluginDaemonSet},
	{"gpu-feature-discovery/0500_daemonset.yaml", builder.GFDDaemonSet},
	{"state-dcgm-exporter/0900_daemonset.yaml", builder.DCGMExporterDaemonSet},
	{"state-mig-manager/0600_daemonset.yaml", builder.MIGManagerDaemonSet},
}

// filled marks a value the GPU Operator fills in at run time.
func filled(v string) bool { return strings.Contains(v, "FILLED BY") }

// podDiffs lists, as Differences keys, where trainops's pod spec ours
// differs from the GPU Operator's up, field by field.
func podDiffs(ds string, up, ours corev1.PodSpec) []string {
	var out []string
	add := func(format string, a ...any) { out = append(out, ds+": "+fmt.Sprintf(format, a...)) }
	if up.ServiceAccountName != ours.ServiceAccountName {
		add("serviceAccountName %s", ours.ServiceAccountName)
	}
	if up.PriorityClassName != ours.PriorityClassName {
		add("priorityClassName %s", ours.PriorityClassName)
	}
	for _, f := range []struct {
		name      string
		up, trops bool
	}{{"hostPID", up.HostPID, ours.HostPID}, {"hostIPC", up.HostIPC, ours.HostIPC}, {"hostNetwork", up.HostNetwork, ours.HostNetwork}} {
		if f.up != f.trops {
			add("%s %v", f.name, f.trops)
		}
	}
	for _, tol := range up.Tolerations {
		if !slices.ContainsFunc(ours.Tolerations, func(o corev1.Toleration) bool { return o.MatchToleration(&tol) }) {
			add("toleration %s %s", tol.Key, tol.Effect)
		}
	}
	for k := range up.NodeSelector {
		if _, ok := ours.NodeSelector[k]; !ok {
			add("nodeSelector %s", k)
		}
	}
	for _, uc := range append(slices.Clone(up.InitContainers), up.Containers...) {
		oc, kind := findContainer(ours, uc.Name)
		if oc == nil {
			add("container %s", uc.Name)
			continue
		}
		out = append(out, containerDiffs(ds+"/"+uc.Name, kind, up, ours, uc, *oc)...)
	}
	return out
}

// findContainer is ours's container or init container name, and which.
func findContainer(ps corev1.PodSpec, name string) (*corev1.Container, string) {
	for i := range ps.InitContainers {
		if ps.InitContainers[i].Name == name {
			return &ps.InitContainers[i], "init"
		}
	}
	for i := range ps.Containers {
		if ps.Containers[i].Name == name {
			return &ps.Containers[i], "main"
		}
	}
	return nil, ""
}

// containerDiffs compares one container: command and args, env, host
// mounts, privilege.
func containerDiffs(key, kind string, upPod, oursPod corev1.PodSpec, uc, oc corev1.Container) []string {
	var out []string
	add := func(format string, a ...any) { out = append(out, key+": "+fmt.Sprintf(format, a...)) }
	if _, upKind := findContainer(upPod, uc.Name); upKind != kind {
		add("%s container", kind)
	}
	if len(uc.Command) > 0 && !slices.Equal(uc.Command, oc.Command) {
		add("command %s", strings.Join(oc.Command, " "))
	}
	if len(uc.Args) > 0 && !slices.Equal(uc.Args, oc.Args) {
		add("args")
	}
	for _, e := range uc.Env {
		i := slices.IndexFunc(oc.Env, func(x corev1.EnvVar) bool { return x.Name == e.Name })
		switch {
		case i < 0:
			add("env %s", e.Name)
		case e.Value != "" && !filled(e.Value) && oc.Env[i].Value != e.Value:
			add("env %s=%s", e.Name, oc.Env[i].Value)
		}
	}
	for _, e := range oc.Env {
		if !slices.ContainsFunc(uc.Env, func(x corev1.EnvVar) bool { return x.Name == e.Name }) {
			add("extra env %s", e.Name)
		}
	}
	privileged := func(c corev1.Container) bool {
		return c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
	}
	if privileged(uc) != privileged(oc) {
		add("privileged %v", privileged(oc))
	}
	for _, um := range uc.VolumeMounts {
		uv := volume(upPod, um.Name)
		if uv == nil || uv.HostPath == nil {
			continue
		}
		i := slices.IndexFunc(oc.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == um.MountPath })
		if i < 0 {
			add("mount %s", um.MountPath)
			continue
		}
		om := oc.VolumeMounts[i]
		ov := volume(oursPod, om.Name)
		switch {
		case ov == nil || ov.HostPath == nil || ov.HostPath.Path != uv.HostPath.Path:
			add("mount %s from another host path", um.MountPath)
		case propagation(um) != propagation(om):
			add("mount %s propagation %s", um.MountPath, propagation(om))
		case um.ReadOnly != om.ReadOnly:
			add("mount %s readOnly %v", um.MountPath, om.ReadOnly)
		}
	}
	for _, om := range oc.VolumeMounts {
		ov := volume(oursPod, om.Name)
		if ov == nil || ov.HostPath == nil {
			continue
		}
		if !slices.ContainsFunc(uc.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == om.MountPath }) {
			add("extra mount %s from the node's %s", om.MountPath, ov.HostPath.Path)
		}
	}
	return out
}

func volume(ps corev1.PodSpec, name string) *corev1.Volume {
	for i := range ps.Volumes {
		if ps.Volumes[i].Name == name {
			return &ps.Volumes[i]
		}
	}
	return nil
}

func propagation(m corev1.VolumeMount) corev1.MountPropagationMode {
	if m.MountPropagation == nil {
		return corev1.MountPropagationNone
	}
	return *m.MountPropagation
}

// transform applies to the GPU Operator's manifest up what its Transform
// function for the component sets in code for cp: the CDI variables, read
// from that code (cdiEnv); the MIG variables of the device plugin and GFD,
// and for the toolkit the runtime's config and socket, by running the GPU
// Operator's own functions (zz_generated.upstream.go); and the toolkit's
// CRI-O hooks folder, read from TransformToolkit.
func transform(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, daemonSet string, up *appsv1.DaemonSet) {
	switch daemonSet {
	case builder.ToolkitDaemonSet:
		forRuntime(t, cp, up)
	case ubuntuDriver:
		kernelModules(t, cp, up)
	case builder.DevicePluginDaemonSet, builder.GFDDaemonSet:
		// TransformDevicePlugin's and TransformGPUDiscoveryPlugin's calls.
		applyMIGConfiguration(&up.Spec.Template.Spec.Containers[0], gpuv1.MIGStrategy(cp.Spec.MIGManager.Strategy))
		spec := &gpuv1.ClusterPolicySpec{}
		if cp.Spec.DevicePlugin.Config != nil {
			spec.DevicePlugin.Config = &gpuv1.DevicePluginConfig{Name: builder.DevicePluginConfigMap}
			// The config manager runs the device plugin's image.
			ref, tag, _ := strings.Cut(cp.Spec.DevicePlugin.Image, ":")
			i := strings.LastIndex(ref, "/")
			spec.DevicePlugin.Repository, spec.DevicePlugin.Image, spec.DevicePlugin.Version = ref[:i], ref[i+1:], tag
		}
		if err := handleDevicePluginConfig(up, spec); err != nil {
			t.Fatal(err)
		}
	}
	fn := map[string]string{builder.ToolkitDaemonSet: "TransformToolkit", builder.DevicePluginDaemonSet: "TransformDevicePlugin", builder.MIGManagerDaemonSet: "TransformMIGManager"}[daemonSet]
	cdi := cp.Spec.ContainerRuntime.CDI
	if fn == "" || !cdi.Enabled {
		return
	}
	enabled, onlyDefault := cdiEnv(t, fn)
	set := func(vars map[string]string) {
		for name, value := range vars {
			if value == "?" {
				value = "" // a path computed at run time: compared by name
			}
			ctr := &up.Spec.Template.Spec.Containers[0]
			i := slices.IndexFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == name })
			if i < 0 {
				ctr.Env = append(ctr.Env, corev1.EnvVar{Name: name, Value: value})
			} else {
				ctr.Env[i].Value = value
			}
		}
	}
	set(enabled)
	if cdi.Default {
		set(onlyDefault)
	}
}

// kernelModules is what the GPU Operator's transformDriverContainer sets
// on its driver container for cp's driver.kernelModuleType, with its own
// variable names and its own DriverSpec.OpenKernelModulesEnabled; and
// trainops's default must be the GPU Operator's (values.yaml).
func kernelModules(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, up *appsv1.DaemonSet) {
	_, consts := objectControls(t)
	name, open := consts["KernelModuleTypeEnvName"], consts["OpenKernelModulesEnabledEnvName"]
	if name == "" || open == "" {
		t.Fatal("no kernel module variables in the GPU Operator's object_controls.go")
	}
	var values struct {
		Driver struct {
			KernelModuleType string `json:"kernelModuleType"`
		} `json:"driver"`
	}
	readYAML(t, filepath.Join(upstream(t), "deployments", "gpu-operator", "values.yaml"), &values)
	if def := clusterPolicy(t, "clusterpolicy-minimal").Spec.Driver.KernelModuleType; def != values.Driver.KernelModuleType {
		t.Errorf("driver.kernelModuleType defaults to %q, the GPU Operator's to %q", def, values.Driver.KernelModuleType)
	}
	d := gpuv1.DriverSpec{KernelModuleType: cp.Spec.Driver.KernelModuleType}
	ctr, _ := findContainer(up.Spec.Template.Spec, "nvidia-driver-ctr")
	if ctr == nil {
		t.Fatal("no nvidia-driver-ctr in the GPU Operator's driver DaemonSet")
	}
	if d.KernelModuleType != "" {
		setContainerEnv(ctr, name, d.KernelModuleType)
		if d.OpenKernelModulesEnabled() {
			setContainerEnv(ctr, open, "true")
		}
	}
}

// forRuntime runs the GPU Operator's own transformForRuntime
// (zz_generated.upstream.go, copied from its code) on its toolkit manifest
// for cp's runtime, with the operator's defaults for the config file and
// socket; and for CRI-O off OpenShift it sets the crio-hooks folder that
// TransformToolkit sets, read from that function.
func forRuntime(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, up *appsv1.DaemonSet) {
	runtime := cp.Spec.ContainerRuntime.Runtime
	if err := transformForRuntime(up, &gpuv1.ClusterPolicySpec{}, runtime, up.Spec.Template.Spec.Containers[0].Name); err != nil {
		t.Fatalf("the GPU Operator's transformForRuntime for %q: %v", runtime, err)
	}
	if runtime != gpuv1.CRIO.String() {
		return
	}
	hooks := crioHooksFolder(t)
	for i := range up.Spec.Template.Spec.Volumes {
		if v := &up.Spec.Template.Spec.Volumes[i]; v.Name == "crio-hooks" {
			v.HostPath.Path = hooks
		}
	}
}

// crioHooksFolder is the host folder the GPU Operator's TransformToolkit
// gives the crio-hooks volume for CRI-O off OpenShift: the string it
// assigns inside its `volume.Name == "crio-hooks"` branch.
func crioHooksFolder(t *testing.T) string {
	t.Helper()
	f, _ := objectControls(t)
	var folder string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "TransformToolkit" {
			continue
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			ifs, ok := n.(*ast.IfStmt)
			if !ok {
				return true
			}
			cond, ok := ifs.Cond.(*ast.BinaryExpr)
			if !ok {
				return true
			}
			if lit, isLit := cond.Y.(*ast.BasicLit); !isLit || lit.Value != `"crio-hooks"` {
				return true
			}
			ast.Inspect(ifs.Body, func(n ast.Node) bool {
				if as, ok := n.(*ast.AssignStmt); ok && len(as.Rhs) == 1 {
					if lit, ok := as.Rhs[0].(*ast.BasicLit); ok {
						folder, _ = strconv.Unquote(lit.Value)
					}
				}
				return true
			})
			return false
		})
	}
	if folder == "" {
		t.Fatal("no crio-hooks folder in the GPU Operator's TransformToolkit")
	}
	return folder
}

// policies are the ClusterPolicies the stack is compared on: defaults,
// MIG on, CDI on (and the default mode), the driver pre-installed, CRI-O,
// per-node device-plugin configurations, MIG with CDI, the GPU Operator's
// isolation, and open kernel modules.
func policies(t *testing.T) map[string]*gpuv1alpha1.ClusterPolicy {
	out := map[string]*gpuv1alpha1.ClusterPolicy{
		"defaults": clusterPolicy(t, "clusterpolicy-minimal"),
		"MIG on":   clusterPolicy(t, "clusterpolicy-mig"),
	}
	cdi := clusterPolicy(t, "clusterpolicy-minimal")
	cdi.Spec.ContainerRuntime.CDI = gpuv1alpha1.CDISpec{Enabled: true, Default: true}
	out["CDI on"] = cdi
	off := false
	noDriver := clusterPolicy(t, "clusterpolicy-minimal")
	noDriver.Spec.Driver.Enabled = &off
	out["driver pre-installed"] = noDriver
	crio := clusterPolicy(t, "clusterpolicy-minimal")
	crio.Spec.ContainerRuntime.Runtime = "crio"
	out["CRI-O"] = crio
	perNode := clusterPolicy(t, "clusterpolicy-minimal")
	perNode.Spec.DevicePlugin.Config = &gpuv1alpha1.DevicePluginConfig{PerNode: []gpuv1alpha1.NamedDevicePluginConfig{{Name: "shared-4", Sharing: gpuv1alpha1.SharingSpec{
		TimeSlicing: &gpuv1alpha1.TimeSlicingSpec{Resources: []gpuv1alpha1.TimeSlicingResource{{Name: "nvidia.com/gpu", Replicas: 4}}}}}}}
	out["per-node device-plugin configs"] = perNode
	migCDI := clusterPolicy(t, "clusterpolicy-mig")
	migCDI.Spec.ContainerRuntime.CDI = gpuv1alpha1.CDISpec{Enabled: true}
	out["MIG and CDI on"] = migCDI
	// The GPU Operator's default isolation shows no difference of its own.
	envvar := clusterPolicy(t, "clusterpolicy-mig")
	envvar.Spec.ContainerRuntime.Isolation = gpuv1alpha1.IsolationEnvvar
	out["isolation Envvar"] = envvar
	openModules := clusterPolicy(t, "clusterpolicy-minimal")
	openModules.Spec.Driver.KernelModuleType = "open"
	out["open kernel modules"] = openModules
	return out
}

// TestDaemonSetsMatchUpstreamFieldByField: for each of policies, every
// DaemonSet is the GPU Operator's manifest for that component, field by
// field (service account, priority, host namespaces, tolerations, node
// selector, update strategy, and for each container its kind, command,
// args, env, host mounts with propagation and readOnly, and privilege),
// unless Differences says why not.
func TestDaemonSetsMatchUpstreamFieldByField(t *testing.T) {
	seen := map[string]bool{}
	for name, cp := range policies(t) {
		objs := builder.ForClusterPolicy(cp, builder.OfflineGPUNodes).Objects
		for _, c := range components {
			var ours []*appsv1.DaemonSet
			for _, o := range objs {
				if ds, ok := o.(*appsv1.DaemonSet); ok && ofComponent(ds.Name, c.daemonSet) {
					ours = append(ours, ds)
				}
			}
			if want := perConfig(cp, c.daemonSet); len(ours) != want {
				t.Errorf("%s: %d DaemonSets of %s compared, want %d", name, len(ours), c.daemonSet, want)
			}
			var up appsv1.DaemonSet
			asset(t, c.asset, &up)
			transform(t, cp, c.daemonSet, &up)
			for _, ds := range ours {
				diffs := podDiffs(up.Name, up.Spec.Template.Spec, ds.Spec.Template.Spec)
				if up.Spec.UpdateStrategy.Type != "" && up.Spec.UpdateStrategy.Type != ds.Spec.UpdateStrategy.Type {
					diffs = append(diffs, fmt.Sprintf("%s: updateStrategy %s", up.Name, ds.Spec.UpdateStrategy.Type))
				}
				sort.Strings(diffs)
				for _, d := range diffs {
					if !seen[d] && !differs(d) {
						t.Errorf("%s, %s: %s; Differences does not say why", name, ds.Name, d)
					}
					seen[d] = true
				}
			}
		}
	}
	for k := range Differences {
		if !seen[k] && !rbacKey(k) {
			t.Errorf("Differences lists %q, which no ClusterPolicy shows: remove it", k)
		}
	}
}

// ofComponent reports whether trainops's DaemonSet name is one of the
// component whose DaemonSet is daemonSet: the driver's, one per OS; the
// device plugin's and GFD's, one per per-node configuration.
func ofComponent(name, daemonSet string) bool {
	switch {
	case daemonSet == builder.DevicePluginDaemonSet && strings.HasPrefix(name, builder.DevicePluginDaemonSetFor("")),
		daemonSet == builder.GFDDaemonSet && strings.HasPrefix(name, builder.GFDDaemonSetFor("")):
		return true
	}
	return strings.HasPrefix(name, daemonSet)
}

// perConfig is how many DaemonSets of the component cp gets, when it has
// one per per-node device-plugin configuration (and the default one).
func perConfig(cp *gpuv1alpha1.ClusterPolicy, daemonSet string) int {
	n := 1
	if cfg := cp.Spec.DevicePlugin.Config; cfg != nil && (daemonSet == builder.DevicePluginDaemonSet || daemonSet == builder.GFDDaemonSet) {
		n += len(cfg.PerNode)
	}
	switch {
	case daemonSet == ubuntuDriver && cp.Spec.Driver.Enabled != nil && !*cp.Spec.Driver.Enabled,
		daemonSet == builder.MIGManagerDaemonSet && !cp.Spec.MIGManager.Enabled:
		return 0
	}
	return n
}

// rbacKey reports whether a Differences key is about RBAC, which
// TestRBACMatchesUpstream checks.
func rbacKey(k string) bool {
	return strings.Contains(k, ": role ") || strings.Contains(k, ": clusterrole ")
}
