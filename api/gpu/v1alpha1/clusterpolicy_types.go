// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ClusterPolicyKind is the kind name of ClusterPolicy.
const ClusterPolicyKind = "ClusterPolicy"

// ClusterPolicySpec is the GPU node stack a cluster should run.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.migManager) && has(self.migManager.enabled) && self.migManager.enabled && has(self.devicePlugin) && has(self.devicePlugin.config) && has(self.devicePlugin.config.sharing) && has(self.devicePlugin.config.sharing.timeSlicing))",message="MIG and time-slicing cannot both be on: disable migManager or remove devicePlugin.config.sharing.timeSlicing",fieldPath=".migManager.enabled"
// +kubebuilder:validation:XValidation:rule="!(has(self.migManager) && has(self.migManager.enabled) && self.migManager.enabled && has(self.devicePlugin) && has(self.devicePlugin.config) && has(self.devicePlugin.config.perNode) && self.devicePlugin.config.perNode.exists(p, has(p.sharing.timeSlicing)))",message="MIG and time-slicing cannot both be on: disable migManager or remove the time-slicing of devicePlugin.config.perNode",fieldPath=".migManager.enabled"
type ClusterPolicySpec struct {
	// Namespace the GPU stack runs in; created if missing.
	// +kubebuilder:default=gpu-operator
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="namespace must be a DNS label: lowercase letters, digits and '-'"
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Driver installs the NVIDIA kernel driver on every GPU node.
	// +kubebuilder:default={}
	// +optional
	Driver DriverSpec `json:"driver,omitempty"`

	// ContainerRuntime configures the NVIDIA container toolkit and CDI.
	// +kubebuilder:default={}
	// +optional
	ContainerRuntime ContainerRuntimeSpec `json:"containerRuntime,omitempty"`

	// DevicePlugin advertises GPUs to the scheduler, optionally shared by
	// time-slicing.
	// +kubebuilder:default={}
	// +optional
	DevicePlugin DevicePluginSpec `json:"devicePlugin,omitempty"`

	// MIGManager partitions A100/H100-class GPUs with Multi-Instance GPU.
	// +kubebuilder:default={}
	// +optional
	MIGManager MIGManagerSpec `json:"migManager,omitempty"`

	// DCGM exports GPU telemetry for Prometheus.
	// +kubebuilder:default={}
	// +optional
	DCGM DCGMSpec `json:"dcgm,omitempty"`

	// GFD is GPU feature discovery: it labels each GPU node with its GPUs'
	// product, memory and count (nvidia.com/gpu.product...), through Node
	// Feature Discovery, so a PyJob can select a GPU model.
	// +kubebuilder:default={}
	// +optional
	GFD GFDSpec `json:"gfd,omitempty"`

	// Validator checks each node's driver and toolkit and writes the files
	// in /run/nvidia/validations that the other components wait for.
	// +kubebuilder:default={}
	// +optional
	Validator ValidatorSpec `json:"validator,omitempty"`

	// NodeSelector narrows the nodes every component runs on. trainops
	// labels GPU nodes (found by Node Feature Discovery's
	// feature.node.kubernetes.io/pci-0302_10de.present=true, or by their
	// nvidia.com/gpu capacity) with nvidia.com/gpu.deploy.<component>=true,
	// and each component selects its label plus these.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations are added to every component.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// PriorityClassName of every component's pods.
	// +kubebuilder:default=system-node-critical
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// TakeOverExisting lets trainops change objects of the GPU stack's
	// names that it did not create (an NVIDIA GPU Operator's or Helm's),
	// and run beside a served clusterpolicies.nvidia.com, to migrate from
	// them. Off: such objects are left as they are and the ClusterPolicy
	// reports the conflict.
	// +kubebuilder:default=false
	// +optional
	TakeOverExisting bool `json:"takeOverExisting"`

	// RollingUpdate paces the rollout of every DaemonSet except the driver's
	// (see driver.upgradePolicy).
	// +kubebuilder:default={}
	// +optional
	RollingUpdate RollingUpdateSpec `json:"rollingUpdate,omitempty"`

	// Remediation takes GPU nodes that fail out of service and returns
	// them once healthy.
	// +kubebuilder:default={}
	// +optional
	Remediation RemediationSpec `json:"remediation,omitempty"`
}

// RollingUpdateSpec paces a DaemonSet rollout.
type RollingUpdateSpec struct {
	// MaxUnavailable is how many nodes (or what percentage) may be without
	// the component during a rollout.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^[1-9][0-9]?%$|^100%$')",message="maxUnavailable must be a positive number of nodes or a percentage from 1% to 100%"
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// DriverSpec is the NVIDIA driver DaemonSet.
type DriverSpec struct {
	// Enabled deploys the driver DaemonSet.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Repository of the driver image.
	// +kubebuilder:default="nvcr.io/nvidia"
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Repository string `json:"repository,omitempty"`

	// Image name of the driver, without repository or tag.
	// +kubebuilder:default=driver
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Image string `json:"image,omitempty"`

	// Version of the driver, used as the image tag.
	// +kubebuilder:default="580.82.07"
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_][A-Za-z0-9_.-]*$')",message="version must be a driver version usable as an image tag, e.g. 535.104.05"
	// +optional
	Version string `json:"version,omitempty"`

	// KernelModuleType is the kind of kernel modules the driver container
	// installs: auto chooses from the node's GPUs and the driver branch,
	// open the open GPU kernel modules, proprietary NVIDIA's.
	// +kubebuilder:default=auto
	// +kubebuilder:validation:Enum=auto;open;proprietary
	// +optional
	KernelModuleType string `json:"kernelModuleType,omitempty"`

	// UpgradePolicy says how a new driver version reaches the nodes.
	// +kubebuilder:default={}
	// +optional
	UpgradePolicy DriverUpgradePolicy `json:"upgradePolicy,omitempty"`

	// Tolerations added to the driver pods only.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// DriverUpgradePolicy says how the driver is upgraded. Replacing a driver
// restarts every GPU workload on the node, so by default each node keeps
// its driver until an operator deletes its driver pod (the DaemonSet is
// OnDelete).
type DriverUpgradePolicy struct {
	// AutoUpgrade upgrades the driver node by node, as the GPU Operator's
	// upgrade controller does: cordon the node, evict its GPU pods, delete
	// its driver and validator pods, wait until the new driver is ready
	// and validated, uncordon. Each
	// node's state is in its nvidia.com/gpu-driver-upgrade-state label. A
	// node that fails stops the rollout.
	// +kubebuilder:default=false
	// +optional
	AutoUpgrade bool `json:"autoUpgrade"`

	// MaxParallelUpgrades is how many nodes upgrade at once.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxParallelUpgrades *int32 `json:"maxParallelUpgrades,omitempty"`

	// MaxUnavailable caps the nodes upgrading at once as a number or a
	// percentage of the GPU nodes (rounded up); the lower of it and
	// maxParallelUpgrades applies.
	// +kubebuilder:default="25%"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^[1-9][0-9]?%$|^100%$')",message="maxUnavailable must be a positive number of nodes or a percentage from 1% to 100%"
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// Drain is how a node's GPU pods are evicted before its driver is
	// replaced.
	// +kubebuilder:default={}
	// +optional
	Drain DrainSpec `json:"drain,omitempty"`

	// PodDeletion says which GPU pods may be evicted, as the GPU
	// Operator's podDeletion does.
	// +kubebuilder:default={}
	// +optional
	PodDeletion PodDeletionSpec `json:"podDeletion,omitempty"`

	// ValidationTimeout is how long a node's new driver may take to become
	// ready, and the node's new validator pod to validate it, before the
	// node is marked upgrade-failed and the rollout stops.
	// +kubebuilder:default="30m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('24h')",message="validationTimeout must be from 10s to 24h"
	// +optional
	ValidationTimeout *metav1.Duration `json:"validationTimeout,omitempty"`
}

// ContainerRuntimeSpec is the NVIDIA container toolkit DaemonSet.
type ContainerRuntimeSpec struct {
	// Enabled deploys the container toolkit DaemonSet.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Image of the container toolkit.
	// +kubebuilder:default="nvcr.io/nvidia/k8s/container-toolkit:v1.17.8-ubuntu20.04"
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// CDI configures the Container Device Interface.
	// +kubebuilder:default={}
	// +optional
	CDI CDISpec `json:"cdi,omitempty"`

	// Runtime is the nodes' container runtime, which the toolkit configures
	// to run the nvidia runtime handler.
	// +kubebuilder:default=containerd
	// +kubebuilder:validation:Enum=containerd;crio
	// +optional
	Runtime string `json:"runtime,omitempty"`

	// Isolation is how a container is given GPUs. Strict: only through
	// the device plugin, for a container with a GPU limit; the toolkit
	// ignores NVIDIA_VISIBLE_DEVICES from unprivileged containers and the
	// device plugin hands the devices over as volume mounts (and CDI
	// annotations with CDI on), so a team's pod that sets
	// NVIDIA_VISIBLE_DEVICES=all without a limit gets no GPU. Envvar: the
	// GPU Operator's default, where any container that sets the variable
	// sees those GPUs, limit or not.
	// +kubebuilder:default=Strict
	// +optional
	Isolation GPUIsolation `json:"isolation,omitempty"`

	// ConfigPath is the runtime's configuration file on the nodes. Empty:
	// /etc/containerd/config.toml for containerd; for CRI-O the drop-in
	// /etc/crio/crio.conf.d/99-nvidia.conf, which overrides the main file
	// and every drop-in before it. k3s and RKE2 keep containerd's
	// elsewhere (see docs/gpu-nodes.md).
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') && !self.endsWith('/')",message="configPath must be an absolute path to a file"
	// +optional
	ConfigPath string `json:"configPath,omitempty"`

	// SocketPath is containerd's socket on the nodes, for the toolkit to
	// restart it. Empty: /run/containerd/containerd.sock.
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') && !self.endsWith('/')",message="socketPath must be an absolute path to a socket"
	// +optional
	SocketPath string `json:"socketPath,omitempty"`
}

// GPUIsolation is how a container is given GPUs.
// +kubebuilder:validation:Enum=Strict;Envvar
type GPUIsolation string

// The ways a container is given GPUs.
const (
	IsolationStrict GPUIsolation = "Strict"
	IsolationEnvvar GPUIsolation = "Envvar"
)

// GFDSpec is the GPU feature discovery DaemonSet.
type GFDSpec struct {
	// Enabled deploys GPU feature discovery.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Image of GPU feature discovery (shipped in the device plugin's image).
	// +kubebuilder:default="nvcr.io/nvidia/k8s-device-plugin:v0.17.4"
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`
}

// ValidatorSpec is the validator DaemonSet and the image of the init
// containers that wait for the driver and toolkit.
type ValidatorSpec struct {
	// Image of the GPU Operator's validator.
	// +kubebuilder:default="nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.4"
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`
}

// CDISpec configures the Container Device Interface.
type CDISpec struct {
	// Enabled makes the toolkit generate CDI specs and containers get GPUs
	// through CDI.
	// +kubebuilder:default=false
	// +optional
	Enabled bool `json:"enabled"`

	// Default makes CDI the NVIDIA runtime's default mode for every
	// container it runs (NVIDIA_CONTAINER_RUNTIME_MODE=cdi), as the GPU
	// Operator's cdi.default does. Without it the runtime keeps its legacy
	// mode and uses CDI for the devices the device plugin annotates.
	// +kubebuilder:default=false
	// +optional
	Default bool `json:"default,omitempty"`
}

// DevicePluginSpec is the NVIDIA device plugin DaemonSet.
type DevicePluginSpec struct {
	// Enabled deploys the device plugin DaemonSet.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Image of the device plugin.
	// +kubebuilder:default="nvcr.io/nvidia/k8s-device-plugin:v0.17.4"
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// Config is the device plugin's own configuration.
	// +optional
	Config *DevicePluginConfig `json:"config,omitempty"`
}

// DevicePluginConfig is the device plugin's configuration file.
type DevicePluginConfig struct {
	// Sharing lets several pods share one GPU.
	// +optional
	Sharing *SharingSpec `json:"sharing,omitempty"`

	// PerNode are further configurations, each for the nodes labelled
	// nvidia.com/device-plugin.config=<name> (the GPU Operator's label for
	// a node's device plugin configuration); other nodes use sharing
	// above. Each runs as its own device plugin DaemonSet,
	// nvidia-device-plugin-<name>.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	PerNode []NamedDevicePluginConfig `json:"perNode,omitempty"`
}

// NamedDevicePluginConfig is a device plugin configuration that nodes
// choose by name.
type NamedDevicePluginConfig struct {
	// Name is the value of the nodes' nvidia.com/device-plugin.config
	// label.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="name must be lowercase letters, digits and '-': it is a node label value and names a DaemonSet"
	// +required
	Name string `json:"name"`

	// Sharing lets several pods share one GPU on those nodes.
	// +required
	Sharing SharingSpec `json:"sharing"`
}

// SharingSpec lets several pods share one GPU.
type SharingSpec struct {
	// TimeSlicing advertises each GPU as several, which take turns.
	// +optional
	TimeSlicing *TimeSlicingSpec `json:"timeSlicing,omitempty"`
}

// TimeSlicingSpec advertises each GPU as several replicas that take turns.
type TimeSlicingSpec struct {
	// RenameByDefault advertises shared GPUs as <name>.shared.
	// +optional
	RenameByDefault bool `json:"renameByDefault,omitempty"`

	// FailRequestsGreaterThanOne rejects pods asking for more than one shared
	// GPU (a shared GPU gives no more compute).
	// +optional
	FailRequestsGreaterThanOne bool `json:"failRequestsGreaterThanOne,omitempty"`

	// Resources lists each resource to share and into how many replicas.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +required
	Resources []TimeSlicingResource `json:"resources"`
}

// TimeSlicingResource shares one extended resource.
type TimeSlicingResource struct {
	// Name of the resource, e.g. nvidia.com/gpu.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^nvidia\\\\.com/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="name must be an NVIDIA resource such as nvidia.com/gpu"
	// +required
	Name string `json:"name"`

	// Replicas is how many pods share each GPU.
	// +kubebuilder:validation:XValidation:rule="self >= 2",message="time-slicing replicas must be at least 2 (1 would not share the GPU)"
	// +kubebuilder:validation:XValidation:rule="self <= 64",message="time-slicing replicas must be at most 64"
	// +required
	Replicas int32 `json:"replicas"`
}

// MIGManagerSpec is the MIG manager DaemonSet.
type MIGManagerSpec struct {
	// Enabled deploys the MIG manager DaemonSet.
	// +kubebuilder:default=false
	// +optional
	Enabled bool `json:"enabled"`

	// Image of the MIG manager.
	// +kubebuilder:default="nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.12.3-ubuntu20.04"
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// Strategy is how MIG devices are advertised: single (all GPUs of a node
	// partitioned alike, still nvidia.com/gpu) or mixed (nvidia.com/mig-*).
	// +kubebuilder:default=single
	// +kubebuilder:validation:Enum=single;mixed
	// +optional
	Strategy string `json:"strategy,omitempty"`

	// Profiles are MIG layouts a node takes when labelled
	// nvidia.com/mig.config=<name>, besides all-disabled and all-enabled
	// (MIG mode on, no instances), which always exist.
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +optional
	Profiles []MIGProfile `json:"profiles,omitempty"`
}

// MIGProfile partitions every GPU of a node alike.
type MIGProfile struct {
	// Name is the value of the nodes' nvidia.com/mig.config label.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="name must be lowercase letters, digits, '-' and '.': it is a node label value"
	// +kubebuilder:validation:XValidation:rule="self != 'all-disabled' && self != 'all-enabled'",message="all-disabled and all-enabled always exist: choose another name"
	// +required
	Name string `json:"name"`

	// Devices is how many MIG devices of each profile (such as 1g.10gb or
	// 3g.40gb) each GPU is split into.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=16
	// +required
	Devices map[string]int32 `json:"devices"`
}

// DCGMSpec is GPU telemetry.
type DCGMSpec struct {
	// Exporter is the DCGM exporter DaemonSet and its Service.
	// +kubebuilder:default={}
	// +optional
	Exporter DCGMExporterSpec `json:"exporter,omitempty"`
}

// DCGMExporterSpec is the DCGM exporter DaemonSet.
type DCGMExporterSpec struct {
	// Enabled deploys the exporter, its Service and ServiceMonitor.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Image of the DCGM exporter.
	// +kubebuilder:default="nvcr.io/nvidia/k8s/dcgm-exporter:4.3.1-4.4.0-ubuntu22.04"
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// ServiceMonitor makes Prometheus Operator scrape the exporter.
	// +kubebuilder:default={}
	// +optional
	ServiceMonitor ServiceMonitorSpec `json:"serviceMonitor,omitempty"`
}

// ServiceMonitorSpec is the monitoring.coreos.com/v1 ServiceMonitor of the
// exporter.
type ServiceMonitorSpec struct {
	// Enabled creates the ServiceMonitor.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Interval between scrapes, a Prometheus duration such as 15s or 1m.
	// +kubebuilder:default="15s"
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self != '' && self.matches('^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$')",message="interval must be a Prometheus duration such as 15s, 1m or 1h30m"
	// +optional
	Interval string `json:"interval,omitempty"`
}

// ClusterPolicy is the GPU node stack of the cluster: driver, container
// toolkit, device plugin, DCGM exporter and MIG manager as DaemonSets on GPU
// nodes. It is a singleton: the oldest ClusterPolicy is active.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=gpupolicy,categories=trainops
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.namespace`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec   ClusterPolicySpec   `json:"spec,omitempty"`
	Status ClusterPolicyStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (in *ClusterPolicy) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions replaces the status conditions.
func (in *ClusterPolicy) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// ObserveGeneration records, in status.observedGeneration, that the status
// describes the current spec.
func (in *ClusterPolicy) ObserveGeneration() { in.Status.ObservedGeneration = in.Generation }

// +kubebuilder:object:root=true

// ClusterPolicyList is a list of ClusterPolicies.
type ClusterPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ClusterPolicy{}, &ClusterPolicyList{})
}
