// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Well-known names of GPU node remediation.
const (
	// RemediationTaintKey is the NoSchedule taint trainops puts on a GPU
	// node it takes out of service; its value names the cause (xid-79,
	// ecc-dbe, a health reporter's condition type). trainops removes only
	// this taint.
	RemediationTaintKey = "trainops.dev/gpu-unhealthy"
	// RemediatedLabel set to "true" by an admin on a node out of service
	// returns it at once; trainops then removes the label.
	RemediatedLabel = "trainops.dev/remediated"
	// RemediationAnnotation holds, on a node out of service, what trainops
	// needs to return it: since when, why, whether trainops cordoned it,
	// its boot ID then, since when it reports healthy.
	RemediationAnnotation = "trainops.dev/remediation"
	// NodeOutOfServiceReason is the reason of the Events trainops records
	// on a node it takes out of service, and on the failed pods of
	// PyJobs that ran there (which an SREAgent with autoRepair reruns).
	NodeOutOfServiceReason = "NodeOutOfService"
	// EventReporter is the reporting controller of every Event trainops
	// records; an agent trusts a NodeOutOfService Event only from it.
	EventReporter = "trainops"
)

// RemediationSpec takes GPU nodes that fail out of service: tainted,
// cordoned and their GPU pods evicted, then returned once healthy. The
// health of a node is read from the DCGM exporter (XID errors, ECC, row
// remapping, temperature) and from the Node conditions a health reporter
// sets (nodeConditions).
type RemediationSpec struct {
	// Enabled turns remediation on.
	// +kubebuilder:default=false
	// +optional
	Enabled bool `json:"enabled"`

	// MaxUnavailable is how many GPU nodes (or what percentage of them)
	// may be out of service at once; further failing nodes wait.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^[1-9][0-9]?%$|^100%$')",message="maxUnavailable must be a positive number of nodes or a percentage from 1% to 100%"
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// NodeConditions are the Node condition types a health reporter
	// (node-problem-detector's custom plugin monitors, NVIDIA's health
	// tools) sets True when a node needs to go out of service, such as
	// GPUXidError. A reason naming an XID (XID79) is classified by the
	// XID table; any other reason takes the node out of service.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	// +listType=set
	// +optional
	NodeConditions []string `json:"nodeConditions,omitempty"`

	// Interval between reads of the DCGM exporters.
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s') && duration(self) <= duration('1h')",message="interval must be from 5s to 1h"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// HealthyFor is how long a node out of service must report healthy,
	// after its driver pod restarted or it rebooted, before it returns.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('24h')",message="healthyFor must be from 0s to 24h"
	// +optional
	HealthyFor *metav1.Duration `json:"healthyFor,omitempty"`

	// MinOutOfService is the least time a node stays out of service, so a
	// node that reports bad and good in turn is not cycled faster.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('168h')",message="minOutOfService must be from 0s to 168h"
	// +optional
	MinOutOfService *metav1.Duration `json:"minOutOfService,omitempty"`

	// MaxGPUTemperature in degrees Celsius takes a node out of service when
	// a GPU of it stays at or above it for gpuTemperatureFor. Set it at the
	// GPUs' slowdown temperature (nvidia-smi -q -d TEMPERATURE): while its
	// cooling works, a GPU's own thermal management keeps it below that
	// under any load, so a workload's heat alone cannot take a node out; a
	// failed fan or blocked airflow can. Unset: temperature is left alone.
	// +kubebuilder:validation:Minimum=85
	// +kubebuilder:validation:Maximum=120
	// +optional
	MaxGPUTemperature *int32 `json:"maxGPUTemperature,omitempty"`

	// GPUTemperatureFor is how long a GPU must read at or above
	// maxGPUTemperature, pass after pass, before its node is taken out of
	// service: a peak is reported (an Event), not acted on.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('1h')",message="gpuTemperatureFor must be from 1m to 1h"
	// +optional
	GPUTemperatureFor *metav1.Duration `json:"gpuTemperatureFor,omitempty"`

	// Drain is how the GPU pods of a node out of service are evicted.
	// +kubebuilder:default={}
	// +optional
	Drain DrainSpec `json:"drain,omitempty"`
}

// DrainSpec is how GPU pods leave a node: through the Eviction API, so
// PodDisruptionBudgets are respected.
type DrainSpec struct {
	// Timeout after which pods still on the node are reported, and
	// deleted if force is set.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('24h')",message="timeout must be from 10s to 24h"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// Force deletes, after the timeout, the GPU pods that eviction could
	// not remove (a PodDisruptionBudget forbids it). Off: they stay, and
	// the ClusterPolicy's condition names what keeps them.
	// +kubebuilder:default=false
	// +optional
	Force bool `json:"force"`
}

// PodDeletionSpec filters the GPU pods a driver upgrade evicts, as the GPU
// Operator's driver.upgradePolicy.podDeletion (kubectl drain's filters):
// a GPU pod it keeps fails the node's upgrade before anything on the node
// is evicted, and the condition names the pod.
type PodDeletionSpec struct {
	// Force evicts GPU pods that no controller manages too; they do not
	// come back.
	// +kubebuilder:default=false
	// +optional
	Force bool `json:"force"`

	// DeleteEmptyDir evicts GPU pods with emptyDir volumes too; their
	// local data is lost.
	// +kubebuilder:default=false
	// +optional
	DeleteEmptyDir bool `json:"deleteEmptyDir"`
}
