// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ClusterPolicyState sums up a ClusterPolicy.
// +kubebuilder:validation:Enum=ready;notReady;ignored
type ClusterPolicyState string

// The states of a ClusterPolicy.
const (
	StateReady    ClusterPolicyState = "ready"
	StateNotReady ClusterPolicyState = "notReady"
	StateIgnored  ClusterPolicyState = "ignored"
)

// ComponentStatus counts the pods of one component's DaemonSet.
type ComponentStatus struct {
	// Name of the component, e.g. nvidia-device-plugin-daemonset.
	// +required
	Name string `json:"name"`

	// Desired is the number of nodes that should run the component.
	Desired int32 `json:"desired"`

	// Ready is the number of nodes where it is ready.
	Ready int32 `json:"ready"`
}

// ClusterPolicyStatus is what trainops observed of the GPU stack.
type ClusterPolicyStatus struct {
	// State is ready when every enabled component has all desired pods
	// ready, ignored when another ClusterPolicy is active.
	// +optional
	State ClusterPolicyState `json:"state,omitempty"`

	// Namespace the stack runs in.
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Components counts desired and ready pods per DaemonSet.
	// +listType=map
	// +listMapKey=name
	// +optional
	Components []ComponentStatus `json:"components,omitempty"`

	// Conditions are the kstatus-compatible conditions (Ready, Reconciling,
	// Stalled) and ServiceMonitorAvailable.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}
