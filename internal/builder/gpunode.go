// SPDX-License-Identifier: Apache-2.0

package builder

import (
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
)

// GPUOperatorRelease is the NVIDIA GPU Operator release the GPU stack
// follows: its manifests (assets/state-*) and the code that completes them
// (controllers/), for the component versions of its chart's values.yaml,
// which are trainops's defaults. convert reads that release's
// ClusterPolicy and Helm values.
const GPUOperatorRelease = "v25.3.4"

// GPUOperatorModule is the GPU Operator's source at GPUOperatorRelease, as
// the Go module proxy serves it (a pseudo-version: the proxy does not
// serve the release's tag). The tests hold conversion of its chart's
// values, and hack/tools/gpuparity the GPU stack, to its files.
const GPUOperatorModule = "github.com/NVIDIA/gpu-operator@v0.0.0-20250917190837-d73a0086a6ba"

// Components of the GPU stack, as the GPU Operator names them in its
// nvidia.com/gpu.deploy.<component> node labels.
const (
	ComponentDriver       = "driver"
	ComponentToolkit      = "container-toolkit"
	ComponentValidator    = "operator-validator"
	ComponentDevicePlugin = "device-plugin"
	ComponentGFD          = "gpu-feature-discovery"
	ComponentDCGMExporter = "dcgm-exporter"
	ComponentMIGManager   = "mig-manager"
)

// DeployLabel is the node label that admits a component to a node; "false"
// keeps it off.
func DeployLabel(component string) string { return "nvidia.com/gpu.deploy." + component }

// Paths on a GPU node that the components share.
const (
	// ValidationsDir holds the files that say a node's driver and toolkit
	// are ready; components wait for them before starting.
	ValidationsDir = "/run/nvidia/validations"
	// DriverReadyFile is written by the validator once the driver works;
	// it holds the driver's root (IS_HOST_DRIVER, NVIDIA_DRIVER_ROOT,
	// DRIVER_ROOT_CTR_PATH...) as shell variables.
	DriverReadyFile = ValidationsDir + "/driver-ready"
	// ToolkitReadyFile is written by the validator once containers get
	// GPUs through the toolkit.
	ToolkitReadyFile = ValidationsDir + "/toolkit-ready"
	// driverCtrReadyFile is written by the driver container's startup
	// probe once nvidia-smi works; the driver validation waits for it
	// (see validation: trainops's wait, not the validator's).
	driverCtrReadyFile = ValidationsDir + "/.driver-ctr-ready"
	// driverInstallDir is where the driver container installs the driver.
	driverInstallDir = "/run/nvidia/driver"
	// KubeletDevicePluginsDir holds the kubelet's device-plugin socket.
	KubeletDevicePluginsDir = "/var/lib/kubelet/device-plugins"
	// KubeletPodResourcesDir holds the kubelet's pod-resources socket, from
	// which dcgm-exporter learns which pod uses which GPU.
	KubeletPodResourcesDir = "/var/lib/kubelet/pod-resources"
	// runtimeConfigDir and runtimeSocketDir are where the toolkit
	// container sees the folders of the runtime's config file and socket.
	runtimeConfigDir = "/runtime/config-dir/"
	runtimeSocketDir = "/runtime/sock-dir/"
	// ContainerdConfig and ContainerdSocket are containerd's defaults.
	// CRIOConfig is a drop-in of CRI-O's, read after the main file and
	// every drop-in before it, so that the nvidia runtime the toolkit
	// writes there is not overridden.
	ContainerdConfig = "/etc/containerd/config.toml"
	ContainerdSocket = "/run/containerd/containerd.sock"
	CRIOConfig       = "/etc/crio/crio.conf.d/99-nvidia.conf"
)

// hostMount is a host path mounted into a container.
type hostMount struct {
	volume, host, path string
	typ                corev1.HostPathType
	prop               corev1.MountPropagationMode
	readOnly           bool
}

var (
	dirOrCreate = corev1.HostPathDirectoryOrCreate

	mRunNvidia       = hostMount{volume: "run-nvidia", host: "/run/nvidia", path: "/run/nvidia", typ: dirOrCreate, prop: corev1.MountPropagationBidirectional}
	mValidations     = hostMount{volume: "run-nvidia-validations", host: ValidationsDir, path: ValidationsDir, typ: dirOrCreate}
	mValidationsBi   = hostMount{volume: "run-nvidia-validations", host: ValidationsDir, path: ValidationsDir, typ: dirOrCreate, prop: corev1.MountPropagationBidirectional}
	mValidationsWait = hostMount{volume: "run-nvidia-validations", host: ValidationsDir, path: ValidationsDir, typ: dirOrCreate, prop: corev1.MountPropagationHostToContainer}
	mDriverRoot      = hostMount{volume: "driver-install-dir", host: driverInstallDir, path: "/driver-root", typ: dirOrCreate, prop: corev1.MountPropagationHostToContainer}
	mDriverInstall   = hostMount{volume: "driver-install-dir", host: driverInstallDir, path: driverInstallDir, typ: dirOrCreate, prop: corev1.MountPropagationHostToContainer}
	mHostRoot        = hostMount{volume: "host-root", host: "/", path: "/host", prop: corev1.MountPropagationHostToContainer, readOnly: true}
	mCDI             = hostMount{volume: "cdi-root", host: "/var/run/cdi", path: "/var/run/cdi", typ: dirOrCreate}
	mHostDevChar     = hostMount{volume: "host-dev-char", host: "/dev/char", path: "/host-dev-char"}
	mHostSys         = hostMount{volume: "host-sys", host: "/sys", path: "/sys", typ: corev1.HostPathDirectory}
)

// mountHost mounts m into ctr, adding its volume once.
func (c *component) mountHost(ctr *corev1.Container, m hostMount) {
	found := false
	for _, v := range c.volumes {
		found = found || v.Name == m.volume
	}
	if !found {
		src := &corev1.HostPathVolumeSource{Path: m.host}
		if m.typ != "" {
			src.Type = ptr.To(m.typ)
		}
		c.volumes = append(c.volumes, corev1.Volume{Name: m.volume, VolumeSource: corev1.VolumeSource{HostPath: src}})
	}
	vm := corev1.VolumeMount{Name: m.volume, MountPath: m.path, ReadOnly: m.readOnly}
	if m.prop != "" {
		vm.MountPropagation = ptr.To(m.prop)
	}
	ctr.VolumeMounts = append(ctr.VolumeMounts, vm)
}

func privileged() *corev1.SecurityContext {
	return &corev1.SecurityContext{Privileged: ptr.To(true), SELinuxOptions: &corev1.SELinuxOptions{Level: "s0"}}
}

func fieldEnv(name, field string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: field}}}
}

func env(pairs ...string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, corev1.EnvVar{Name: pairs[i], Value: pairs[i+1]})
	}
	return out
}

// entrypoint is the GPU Operator's entrypoint.sh of a component (the
// ConfigMaps <component>-entrypoint), inlined as a shell script: it waits
// for the validator's driver-ready file, exports what it says (the
// driver's root: IS_HOST_DRIVER, NVIDIA_DRIVER_ROOT...), runs then, and
// execs program. bash runs it, as it runs the GPU Operator's.
func entrypoint(program string, then ...string) []string {
	script := "until [ -f " + DriverReadyFile + " ]; do echo waiting for the driver validations to be ready...; sleep 5; done; " +
		"set -o allexport; . " + DriverReadyFile + "; "
	for _, t := range then {
		script += t + "; "
	}
	return []string{script + "exec " + program}
}

var bashC = []string{"/bin/bash", "-c"}

// waitFor is an init container that waits until file exists on the node.
func (c *component) waitFor(name, image, file, what string) {
	ctr := corev1.Container{
		Name: name, Image: image,
		Command:         []string{"sh", "-c"},
		Args:            []string{fmt.Sprintf("until [ -f %s ]; do echo waiting for %s; sleep 5; done", file, what)},
		SecurityContext: privileged(),
	}
	c.mountHost(&ctr, mValidationsWait)
	c.init = append(c.init, ctr)
}

// validation is an init container running the validator for component
// (driver or toolkit): it checks the component works and writes its
// -ready file; withWait retries until it does.
//
// With trainops's driver container (driverContainer), the driver check
// first waits for the container's startup probe to mark the driver ready
// (.driver-ctr-ready). The validator itself waits for that file only when
// the driver DaemonSet's owner is the GPU Operator's (an nvidia.com/
// ClusterPolicy or NVIDIADriver, its isDriverManagedByOperator); trainops's
// is owned by a gpu.trainops.dev ClusterPolicy, so without this wait the
// validator would pass a driver still being installed, and the startup
// probe would gate nothing.
func (c *component) validation(image, component string, withWait, driverContainer bool) {
	run := "nvidia-validator"
	if component == ComponentDriver && driverContainer {
		run = fmt.Sprintf("until [ -f %s ]; do echo waiting for the driver container; sleep 5; done; exec nvidia-validator", driverCtrReadyFile)
	}
	ctr := corev1.Container{
		Name: component + "-validation", Image: image,
		Command:         []string{"sh", "-c"},
		Args:            []string{run},
		Env:             env("WITH_WAIT", fmt.Sprint(withWait), "COMPONENT", component),
		SecurityContext: privileged(),
	}
	if component == "toolkit" {
		// The validator image says void; the toolkit injects nvidia-smi,
		// which this check runs, only into a container that asks for
		// GPUs.
		ctr.Env = append(env("NVIDIA_VISIBLE_DEVICES", "all"), ctr.Env...)
	}
	if component == ComponentDriver {
		// It lists the namespace's DaemonSets to find a driver container.
		ctr.Env = append(ctr.Env, fieldEnv("OPERATOR_NAMESPACE", "metadata.namespace"))
		c.mountHost(&ctr, mDriverInstall)
		c.mountHost(&ctr, mHostRoot)
		c.mountHost(&ctr, mHostDevChar)
	}
	c.mountHost(&ctr, mValidationsBi)
	c.init = append(c.init, ctr)
}

// afterToolkit is a component that starts once the container toolkit is
// ready on its node, as every component that uses the GPUs does.
func afterToolkit(s gpuv1alpha1.ClusterPolicySpec, name, daemonSet, serviceAccount string) component {
	c := component{name: name, daemonSet: daemonSet, serviceAccount: serviceAccount, runtimeClass: nvidiaRuntimeClass(s)}
	c.waitFor("toolkit-validation", s.Validator.Image, ToolkitReadyFile, "nvidia container stack to be setup")
	return c
}

// with is c running ctr, with the host paths ms mounted into it.
func (c component) with(ctr corev1.Container, ms ...hostMount) component {
	for _, m := range ms {
		c.mountHost(&ctr, m)
	}
	c.container = ctr
	return c
}

// driverComponent installs the driver into /run/nvidia/driver and marks it
// ready (.driver-ctr-ready) once nvidia-smi works.
func driverComponent(s gpuv1alpha1.ClusterPolicySpec, image string) component {
	c := component{name: ComponentDriver, daemonSet: DriverDaemonSet, serviceAccount: "nvidia-driver", hostPID: true}
	ctr := corev1.Container{
		Name: "nvidia-driver-ctr", Image: image,
		Command:         []string{"nvidia-driver"},
		Args:            []string{"init"},
		Env:             append([]corev1.EnvVar{fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("NODE_IP", "status.hostIP")}, kernelModuleEnv(s.Driver)...),
		SecurityContext: privileged(),
		// The GPU Operator's startup-probe.sh: the driver is ready once
		// nvidia-smi answers; the marker tells the driver validation so.
		StartupProbe: &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "nvidia-smi && touch " + driverCtrReadyFile}}},
			InitialDelaySeconds: 60, PeriodSeconds: 10, TimeoutSeconds: 60, FailureThreshold: 120,
		},
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "rm -f " + driverCtrReadyFile}}}},
	}
	return c.with(ctr,
		mRunNvidia,
		hostMount{volume: "var-log", host: "/var/log", path: "/var/log"},
		hostMount{volume: "dev-log", host: "/dev/log", path: "/dev/log"},
		hostMount{volume: "host-os-release", host: "/etc/os-release", path: "/host-etc/os-release", readOnly: true},
		hostMount{volume: "run-nvidia-fabricmanager", host: "/run/nvidia-fabricmanager", path: "/run/nvidia-fabricmanager", typ: dirOrCreate},
		hostMount{volume: "run-nvidia-topologyd", host: "/run/nvidia-topologyd", path: "/run/nvidia-topologyd", typ: dirOrCreate},
		hostMount{volume: "sysfs-memory-online", host: "/sys/devices/system/memory/auto_online_blocks", path: "/sys/devices/system/memory/auto_online_blocks"},
		hostMount{volume: "firmware-search-path", host: "/sys/module/firmware_class/parameters/path", path: "/sys/module/firmware_class/parameters/path"},
		hostMount{volume: "nv-firmware", host: driverInstallDir + "/lib/firmware", path: "/lib/firmware", typ: dirOrCreate},
	)
}

// kernelModuleEnv tells the driver container which kernel modules to
// install, as the GPU Operator's transformDriverContainer does: the type,
// and for open modules the older containers' switch too.
func kernelModuleEnv(d gpuv1alpha1.DriverSpec) []corev1.EnvVar {
	if d.KernelModuleType == "" {
		return nil
	}
	e := env("KERNEL_MODULE_TYPE", d.KernelModuleType)
	if d.KernelModuleType == "open" {
		e = append(e, env("OPEN_KERNEL_MODULES_ENABLED", "true")...)
	}
	return e
}

// runtimePaths are the runtime's config file and socket on the nodes.
// nvidiaRuntimeClass is the runtime class the components that use GPUs
// run with: the nvidia one on containerd, where the toolkit adds it as a
// handler of its own; none on CRI-O, where the toolkit installs an OCI
// hook that serves every container (the GPU Operator's setRuntimeClass).
func nvidiaRuntimeClass(s gpuv1alpha1.ClusterPolicySpec) string {
	if runtime, _, _ := runtimePaths(s.ContainerRuntime); runtime == "containerd" {
		return RuntimeClassName
	}
	return ""
}

func runtimePaths(rt gpuv1alpha1.ContainerRuntimeSpec) (runtime, config, socket string) {
	runtime, config, socket = rt.Runtime, rt.ConfigPath, rt.SocketPath
	if runtime == "" {
		runtime = "containerd"
	}
	if config == "" {
		config = ContainerdConfig
		if runtime == "crio" {
			config = CRIOConfig
		}
	}
	if socket == "" && runtime == "containerd" {
		socket = ContainerdSocket
	}
	return runtime, config, socket
}

// crioHooksDir is the node's folder of OCI hooks the toolkit writes to:
// CRI-O's default off OpenShift; unused with containerd, where the GPU
// Operator's manifest keeps its own default.
func crioHooksDir(runtime string) string {
	if runtime == "crio" {
		return "/usr/share/containers/oci/hooks.d"
	}
	return "/run/containers/oci/hooks.d"
}

// toolkitComponent installs the NVIDIA container toolkit into
// /usr/local/nvidia and adds the nvidia handler to the runtime's config.
// With the driver container it waits for a working driver first; with a
// pre-installed driver (driver.enabled false) it starts at once.
func toolkitComponent(s gpuv1alpha1.ClusterPolicySpec, driver bool) component {
	c := component{name: ComponentToolkit, daemonSet: ToolkitDaemonSet, serviceAccount: "nvidia-container-toolkit", hostPID: true,
		// Its driver validation, too, lists DaemonSets.
		rules: []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"list"}}}}
	runtime, config, socket := runtimePaths(s.ContainerRuntime)
	cfgInCtr := runtimeConfigDir + path.Base(config)
	e := env(
		"ROOT", "/usr/local/nvidia",
		"NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND", "management.nvidia.com/gpu",
		"NVIDIA_VISIBLE_DEVICES", "void",
		"TOOLKIT_PID_FILE", "/run/nvidia/toolkit/toolkit.pid",
		"RUNTIME", runtime,
		"RUNTIME_CONFIG", cfgInCtr,
	)
	if runtime == "containerd" {
		sockInCtr := runtimeSocketDir + path.Base(socket)
		e = append(e, env("CONTAINERD_CONFIG", cfgInCtr, "RUNTIME_SOCKET", sockInCtr, "CONTAINERD_SOCKET", sockInCtr, "CONTAINERD_RUNTIME_CLASS", RuntimeClassName)...)
	} else {
		e = append(e, env("CRIO_CONFIG", cfgInCtr)...)
	}
	if isolationStrict(s) {
		// The runtime then ignores NVIDIA_VISIBLE_DEVICES from an
		// unprivileged container and reads the device plugin's volume
		// mounts instead: no limit, no GPU.
		e = append(e, env("ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "false", "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "true")...)
	}
	if cdi := s.ContainerRuntime.CDI; cdi.Enabled {
		e = append(e, env("CDI_ENABLED", "true", "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_ANNOTATION_PREFIXES", CDIAnnotationPrefix, "CRIO_CONFIG_MODE", "config")...)
		if cdi.Default {
			// Only then: in CDI mode the runtime gives a container only
			// the devices a CDI annotation or request names.
			e = append(e, env("NVIDIA_CONTAINER_RUNTIME_MODE", "cdi")...)
		}
	}
	// Driver container or pre-installed driver, the validator finds the
	// driver and writes its root into driver-ready, which the entrypoint
	// reads.
	c.validation(s.Validator.Image, ComponentDriver, true, driver)
	ctr := corev1.Container{
		Name: "nvidia-container-toolkit-ctr", Image: s.ContainerRuntime.Image,
		// The GPU Operator's entrypoint sleeps before it starts the toolkit:
		// some containerd releases SIGTERM the toolkit right after it
		// restarts them.
		Command: bashC, Args: entrypoint("nvidia-toolkit", "sleep 5"),
		Env: e, SecurityContext: privileged(),
	}
	mounts := []hostMount{
		{volume: "toolkit-root", host: "/run/nvidia/toolkit", path: "/run/nvidia/toolkit", typ: dirOrCreate},
		mValidations,
		{volume: "toolkit-install-dir", host: "/usr/local/nvidia", path: "/usr/local/nvidia"},
		// Where CRI-O reads OCI hooks off OpenShift, as the GPU Operator's
		// TransformToolkit sets it; the toolkit installs its hook there.
		{volume: "crio-hooks", host: crioHooksDir(runtime), path: "/usr/share/containers/oci/hooks.d"},
		mDriverRoot, mHostRoot, mCDI,
		{volume: runtime + "-config", host: path.Dir(config), path: runtimeConfigDir, typ: dirOrCreate},
	}
	if socket != "" {
		mounts = append(mounts, hostMount{volume: runtime + "-socket", host: path.Dir(socket), path: runtimeSocketDir})
	}
	return c.with(ctr, mounts...)
}

// validatorComponent checks the driver and the toolkit on each node and
// writes driver-ready and toolkit-ready, which the other components wait
// for. It runs with the nvidia runtime class, so its toolkit check is a
// container getting GPUs the way workloads do.
func validatorComponent(s gpuv1alpha1.ClusterPolicySpec) component {
	c := component{name: ComponentValidator, daemonSet: ValidatorDaemonSet, serviceAccount: "nvidia-operator-validator", runtimeClass: nvidiaRuntimeClass(s),
		// The driver validation lists DaemonSets to find a driver in a
		// container. The GPU Operator's Role also lets it run pods for
		// the CUDA and plugin workload checks, which trainops does not run.
		rules: []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get", "list", "watch"}}}}
	c.validation(s.Validator.Image, ComponentDriver, true, enabled(s.Driver.Enabled))
	c.validation(s.Validator.Image, "toolkit", false, false)
	ctr := corev1.Container{
		Name: "nvidia-operator-validator", Image: s.Validator.Image,
		Command:         []string{"sh", "-c"},
		Args:            []string{"echo all validations are successful; sleep infinity"},
		SecurityContext: privileged(),
		// Gone validator, gone guarantees: the files go with it.
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "rm -f " + ValidationsDir + "/*-ready"}}}},
	}
	return c.with(ctr, mValidationsBi)
}

// devicePluginComponent advertises the node's GPUs to the kubelet through
// its device-plugin socket, once the toolkit is ready.
func devicePluginComponent(s gpuv1alpha1.ClusterPolicySpec) component {
	ctr := corev1.Container{
		Name: "nvidia-device-plugin", Image: s.DevicePlugin.Image,
		Command: bashC, Args: entrypoint("nvidia-device-plugin"),
		Env: env(
			"PASS_DEVICE_SPECS", "true",
			"FAIL_ON_INIT_ERROR", "true",
			"DEVICE_LIST_STRATEGY", deviceListStrategy(s),
			"DEVICE_ID_STRATEGY", "uuid",
			"NVIDIA_VISIBLE_DEVICES", "all",
			"NVIDIA_DRIVER_CAPABILITIES", "all",
			"MPS_ROOT", "/run/nvidia/mps",
			"MIG_STRATEGY", migStrategy(s), "NVIDIA_MIG_MONITOR_DEVICES", "all",
		),
		SecurityContext: privileged(),
	}
	if s.ContainerRuntime.CDI.Enabled {
		ctr.Env = append(ctr.Env, append(cdiEnv(s), env("CDI_ANNOTATION_PREFIX", CDIAnnotationPrefix)...)...)
	}
	return afterToolkit(s, ComponentDevicePlugin, DevicePluginDaemonSet, "nvidia-device-plugin").with(ctr,
		hostMount{volume: "device-plugin", host: KubeletDevicePluginsDir, path: KubeletDevicePluginsDir},
		mValidations, mDriverRoot, mHostRoot, mCDI,
		hostMount{volume: "mps-shm", host: "/run/nvidia/mps/shm", path: "/dev/shm"},
		hostMount{volume: "mps-root", host: "/run/nvidia/mps", path: "/mps", typ: dirOrCreate},
	)
}

// cdiEnv is what a component that generates CDI specs (the device plugin,
// the MIG manager) needs with CDI on: the switch, and where the toolkit
// installs the hook the specs call. None with CDI off.
func cdiEnv(s gpuv1alpha1.ClusterPolicySpec) []corev1.EnvVar {
	if !s.ContainerRuntime.CDI.Enabled {
		return nil
	}
	e := env("CDI_ENABLED", "true")
	if enabled(s.ContainerRuntime.Enabled) {
		e = append(e, env("NVIDIA_CDI_HOOK_PATH", cdiHookPath)...)
	}
	return e
}

// gfdComponent labels the node with its GPUs' product, memory and count,
// through Node Feature Discovery's features.d folder.
func gfdComponent(s gpuv1alpha1.ClusterPolicySpec) component {
	ctr := corev1.Container{
		Name: "gpu-feature-discovery", Image: s.GFD.Image,
		Command: []string{"gpu-feature-discovery"},
		Env: append(env("GFD_SLEEP_INTERVAL", "60s", "GFD_FAIL_ON_INIT_ERROR", "true", "MIG_STRATEGY", migStrategy(s), "NVIDIA_MIG_MONITOR_DEVICES", "all"),
			fieldEnv("NAMESPACE", "metadata.namespace"), fieldEnv("NODE_NAME", "spec.nodeName")),
		SecurityContext: privileged(),
	}
	return afterToolkit(s, ComponentGFD, GFDDaemonSet, "nvidia-gpu-feature-discovery").with(ctr,
		hostMount{volume: "output-dir", host: "/etc/kubernetes/node-feature-discovery/features.d", path: "/etc/kubernetes/node-feature-discovery/features.d"},
		hostMount{volume: "host-sys", host: "/sys", path: "/sys", readOnly: true},
	)
}

// dcgmExporterComponent serves GPU metrics, naming the pod each GPU is
// given to from the kubelet's pod-resources socket.
func dcgmExporterComponent(s gpuv1alpha1.ClusterPolicySpec) component {
	health := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(DCGMExporterPort)}}, InitialDelaySeconds: 45, PeriodSeconds: 5}
	ctr := corev1.Container{
		Name: "nvidia-dcgm-exporter", Image: s.DCGM.Exporter.Image,
		Env: append(env(
			"DCGM_EXPORTER_LISTEN", fmt.Sprintf(":%d", DCGMExporterPort),
			"DCGM_EXPORTER_KUBERNETES", "true",
			"DCGM_EXPORTER_COLLECTORS", "/etc/dcgm-exporter/dcp-metrics-included.csv"),
			fieldEnv("NODE_NAME", "spec.nodeName")),
		Ports:           []corev1.ContainerPort{{Name: DCGMExporterPortName, ContainerPort: DCGMExporterPort, Protocol: corev1.ProtocolTCP}},
		LivenessProbe:   health,
		ReadinessProbe:  health,
		SecurityContext: privileged(),
	}
	c := afterToolkit(s, ComponentDCGMExporter, DCGMExporterDaemonSet, "nvidia-dcgm-exporter")
	// As the GPU Operator's Role: its ConfigMaps (a metrics list may
	// come from one) and its pods.
	c.rules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps", "pods"}, Verbs: []string{"get", "list"}}}
	return c.with(ctr,
		hostMount{volume: "pod-gpu-resources", host: KubeletPodResourcesDir, path: KubeletPodResourcesDir, readOnly: true})
}

// migManagerComponent partitions the node's GPUs into the layout its
// nvidia.com/mig.config label names: it changes GPU modes through /sys,
// stops the host's GPU clients through /host (when the driver is the
// host's), and pauses the GPU pods of the node while it does.
func migManagerComponent(s gpuv1alpha1.ClusterPolicySpec) component {
	ctr := corev1.Container{
		Name: "nvidia-mig-manager", Image: s.MIGManager.Image,
		// As the GPU Operator's entrypoint: the driver's root from
		// driver-ready, and host GPU clients stopped only when the driver
		// is the host's own.
		Command: []string{"bash", "-c"},
		Args:    entrypoint("nvidia-mig-manager", "export WITH_SHUTDOWN_HOST_GPU_CLIENTS=$IS_HOST_DRIVER"),
		Env: append(env(
			"CONFIG_FILE", "/mig-parted-config/config.yaml",
			"GPU_CLIENTS_FILE", "/gpu-clients/clients.yaml"),
			fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("DEFAULT_GPU_CLIENTS_NAMESPACE", "metadata.namespace")),
		SecurityContext: privileged(),
	}
	c := afterToolkit(s, ComponentMIGManager, MIGManagerDaemonSet, "nvidia-mig-manager").with(ctr,
		mHostSys,
		hostMount{volume: "host-root", host: "/", path: "/host", prop: corev1.MountPropagationHostToContainer},
		mValidations, mDriverRoot, mCDI)
	c.container.Env = append(c.container.Env, cdiEnv(s)...)
	// As the GPU Operator runs it: it stops and starts the host's GPU
	// clients (systemd services) and sees the processes holding GPUs.
	c.hostPID, c.hostIPC = true, true
	for _, cm := range []struct{ volume, name, path string }{
		{"mig-parted-config", MIGPartedConfigMap, "/mig-parted-config"},
		{"gpu-clients", GPUClientsConfigMap, "/gpu-clients"},
	} {
		c.volumes = append(c.volumes, corev1.Volume{Name: cm.volume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.name}}}})
		c.container.VolumeMounts = append(c.container.VolumeMounts, corev1.VolumeMount{Name: cm.volume, MountPath: cm.path, ReadOnly: true})
	}
	// A new layout list must reach the manager, which reads it on start.
	c.podAnnotations = map[string]string{AnnotationConfigHash: hashString(migPartedConfig(s))}
	return c
}
