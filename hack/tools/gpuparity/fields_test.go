// SPDX-License-Identifier: Apache-2.0

package gpuparity

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

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
// from that code (cdiEnv), and for the toolkit what transformForRuntime
// and TransformToolkit's CRI-O branch do (restated here, with the target
// folders read from the code).
func transform(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, daemonSet string, up *appsv1.DaemonSet) {
	if daemonSet == builder.ToolkitDaemonSet {
		forRuntime(t, cp, up)
	}
	fn := map[string]string{builder.ToolkitDaemonSet: "TransformToolkit", builder.DevicePluginDaemonSet: "TransformDevicePlugin"}[daemonSet]
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

// forRuntime is the GPU Operator's transformForRuntime for the toolkit on
// cp's runtime and its default config and socket, and, for CRI-O off
// OpenShift, TransformToolkit's crio-hooks folder.
func forRuntime(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, up *appsv1.DaemonSet) {
	_, consts := objectControls(t)
	configDir, socketDir := consts["DefaultRuntimeConfigTargetDir"], consts["DefaultRuntimeSocketTargetDir"]
	if configDir == "" || socketDir == "" {
		t.Fatal("no runtime target folders in the GPU Operator's object_controls.go")
	}
	runtime, config, socket := "containerd", builder.ContainerdConfig, builder.ContainerdSocket
	if cp.Spec.ContainerRuntime.Runtime == "crio" {
		runtime, config, socket = "crio", builder.CRIOConfig, ""
	}
	ps := &up.Spec.Template.Spec
	ctr := &ps.Containers[0]
	mount := func(name, host, at string) {
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: at})
		ps.Volumes = append(ps.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}})
	}
	setEnv := func(name, value string) {
		ctr.Env = append(slices.DeleteFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == name }), corev1.EnvVar{Name: name, Value: value})
	}
	setEnv("RUNTIME", runtime)
	if runtime == "containerd" {
		setEnv("CONTAINERD_RUNTIME_CLASS", builder.RuntimeClassName)
	}
	setEnv("RUNTIME_CONFIG", configDir+filepath.Base(config))
	setEnv(strings.ToUpper(runtime)+"_CONFIG", configDir+filepath.Base(config))
	mount(runtime+"-config", filepath.Dir(config), configDir)
	if socket != "" {
		setEnv("RUNTIME_SOCKET", socketDir+filepath.Base(socket))
		setEnv("CONTAINERD_SOCKET", socketDir+filepath.Base(socket))
		mount(runtime+"-socket", filepath.Dir(socket), socketDir)
	}
	if runtime == "crio" {
		for i := range ps.Volumes {
			if ps.Volumes[i].Name == "crio-hooks" {
				ps.Volumes[i].HostPath.Path = "/usr/share/containers/oci/hooks.d"
			}
		}
	}
}

// policies are the ClusterPolicies the stack is compared on: defaults,
// MIG on, CDI on (and the default mode), the driver pre-installed, CRI-O,
// and per-node device-plugin configurations.
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
				if ds, ok := o.(*appsv1.DaemonSet); ok && strings.HasPrefix(ds.Name, c.daemonSet) {
					ours = append(ours, ds)
				}
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

// rbacKey reports whether a Differences key is about RBAC, which
// TestRBACMatchesUpstream checks.
func rbacKey(k string) bool {
	return strings.Contains(k, ": role ") || strings.Contains(k, ": clusterrole ")
}
