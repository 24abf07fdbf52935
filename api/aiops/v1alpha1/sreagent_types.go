// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SREAgentKind is the kind name of SREAgent.
const SREAgentKind = "SREAgent"

// SREAgentSpec is the ops agent a team wants in its namespace.
type SREAgentSpec struct {
	// GPUEnable makes the agent also watch GPU health through the DCGM
	// exporter (XID errors, temperature, memory).
	// +kubebuilder:default=false
	// +optional
	GPUEnable bool `json:"gpuEnable"`

	// AutoRepair lets the agent delete pods stuck in CrashLoopBackOff so
	// their controller recreates them, and start a new run
	// (trainops.dev/rerun) of a failed PyJob whose pod failed on a GPU node
	// trainops then took out of service. Without it the agent only reports,
	// and its Role can neither delete pods nor patch PyJobs.
	// +kubebuilder:default=false
	// +optional
	AutoRepair bool `json:"autoRepair"`

	// MonitorInterval is how often, in seconds, the agent inspects the
	// namespace.
	// +kubebuilder:default=15
	// +kubebuilder:validation:XValidation:rule="self >= 5",message="monitorInterval must be at least 5 seconds: shorter intervals load the API server for no gain"
	// +kubebuilder:validation:XValidation:rule="self <= 86400",message="monitorInterval cannot exceed 86400 seconds (one day)"
	// +optional
	MonitorInterval int32 `json:"monitorInterval,omitempty"`

	// Image overrides the agent image (by default trainops's own image, which
	// runs `trainops agent`).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// Replicas of the agent Deployment.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// ExternalScaling leaves the agent Deployment's replicas to another
	// controller, such as a HorizontalPodAutoscaler: trainops does not set
	// them (replicas is then ignored), so it never puts them back.
	// +optional
	ExternalScaling bool `json:"externalScaling,omitempty"`

	// Resources of the agent container; trainops sets modest requests and
	// limits when unset.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// SREAgentStatus is what trainops observed of the agent.
type SREAgentStatus struct {
	// Replicas is the number of agent pods.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// ReadyReplicas is the number of agent pods that are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// Conditions are the kstatus-compatible conditions (Ready, Reconciling,
	// Stalled).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Findings are the problems the agent saw in its last inspection
	// (the first MaxAgentFindings of them). The agent writes them.
	// +kubebuilder:validation:MaxItems=50
	// +listType=atomic
	// +optional
	Findings []SREAgentFinding `json:"findings,omitempty"`

	// Actions are the agent's latest repairs, newest first (at most
	// MaxAgentActions). The agent writes them.
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +optional
	Actions []SREAgentAction `json:"actions,omitempty"`
}

// MaxAgentFindings and MaxAgentActions bound an SREAgent's status.
const (
	MaxAgentFindings = 50
	MaxAgentActions  = 20
)

// SREAgentFinding is a problem an agent found.
type SREAgentFinding struct {
	// Kind of problem, also the reason of its Event (CrashLoopBackOff,
	// PodOnFailedNode, GPUXidError...).
	// +kubebuilder:validation:MaxLength=64
	Kind string `json:"kind"`

	// Object is what the problem is about: Kind/name.
	// +kubebuilder:validation:MaxLength=320
	Object string `json:"object"`

	// Message says what is wrong.
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`

	// Since is when the agent first saw it.
	Since metav1.Time `json:"since"`
}

// SREAgentAction is a repair an agent made (or, in a dry run, would
// have made).
type SREAgentAction struct {
	// Time of the action.
	Time metav1.Time `json:"time"`

	// Action taken: DeletePod or RerunPyJob.
	// +kubebuilder:validation:MaxLength=64
	Action string `json:"action"`

	// Object acted on: Kind/name.
	// +kubebuilder:validation:MaxLength=320
	Object string `json:"object"`

	// Message says what was done and why.
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`

	// DryRun is set when the action was only reported.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
}

// SREAgent is an automated operations agent for one namespace. trainops runs
// it as a Deployment under its own ServiceAccount, with a Role limited to that
// namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sre,categories=trainops
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="AutoRepair",type=boolean,JSONPath=`.spec.autoRepair`
// +kubebuilder:printcolumn:name="GPU",type=boolean,JSONPath=`.spec.gpuEnable`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 52",message="metadata.name must be at most 52 characters: it names the agent's ServiceAccount, Role, RoleBinding and Deployment"
type SREAgent struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec   SREAgentSpec   `json:"spec,omitempty"`
	Status SREAgentStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (in *SREAgent) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions replaces the status conditions.
func (in *SREAgent) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// ObserveGeneration records, in status.observedGeneration, that the status
// describes the current spec.
func (in *SREAgent) ObserveGeneration() { in.Status.ObservedGeneration = in.Generation }

// +kubebuilder:object:root=true

// SREAgentList is a list of SREAgents.
type SREAgentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SREAgent `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SREAgent{}, &SREAgentList{})
}
