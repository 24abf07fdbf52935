// SPDX-License-Identifier: Apache-2.0

package builder

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
)

// Node labels and annotations of the GPU stack.
const (
	// LabelGPUPresent marks a GPU node, as the GPU Operator does.
	LabelGPUPresent = "nvidia.com/gpu.present"
	// AnnotationNodeLabels lists, on a node, the labels trainops added to
	// it, so that it removes exactly those and never an admin's.
	AnnotationNodeLabels = "gpu.trainops.dev/node-labels"
)

// PausedForMIGChange is the value the MIG manager gives a component's
// deploy label while it repartitions the node's GPUs, and sets back to
// true after: the label stays trainops's.
const PausedForMIGChange = "paused-for-mig-change"

// NFDNVIDIALabels are the labels Node Feature Discovery gives a node with
// an NVIDIA PCI device (vendor 0x10de; with the display (0300) or 3D
// controller (0302) class when NFD is set to qualify it), the labels the
// GPU Operator finds GPU nodes by.
var NFDNVIDIALabels = []string{
	"feature.node.kubernetes.io/pci-10de.present",
	"feature.node.kubernetes.io/pci-0302_10de.present",
	"feature.node.kubernetes.io/pci-0300_10de.present",
}

// IsGPUNode reports whether a node has NVIDIA GPUs: Node Feature Discovery
// found one on its PCI bus, or a device plugin already advertises
// nvidia.com/gpu.
func IsGPUNode(labels map[string]string, capacity corev1.ResourceList) bool {
	for _, l := range NFDNVIDIALabels {
		if labels[l] == "true" {
			return true
		}
	}
	q, ok := capacity[GPUResource]
	return ok && !q.IsZero()
}

// Components lists the components cp deploys, by their deploy-label
// names.
func Components(cp *gpuv1alpha1.ClusterPolicy) []string {
	s := cp.Spec
	var out []string
	if enabled(s.Driver.Enabled) {
		out = append(out, ComponentDriver)
	}
	if enabled(s.ContainerRuntime.Enabled) {
		out = append(out, ComponentToolkit)
	}
	out = append(out, ComponentValidator)
	if enabled(s.DevicePlugin.Enabled) {
		out = append(out, ComponentDevicePlugin)
	}
	if enabled(s.GFD.Enabled) {
		out = append(out, ComponentGFD)
	}
	if enabled(s.DCGM.Exporter.Enabled) {
		out = append(out, ComponentDCGMExporter)
	}
	if s.MIGManager.Enabled {
		out = append(out, ComponentMIGManager)
	}
	return out
}

// NodeLabelPlan is how to change one node's labels.
type NodeLabelPlan struct {
	// Set are labels to add, all "true".
	Set []string
	// Remove are labels trainops added and no longer wants.
	Remove []string
	// Owned is the new value of AnnotationNodeLabels ("" to remove it).
	Owned string
}

// Changes reports whether the plan changes the node, whose annotation
// value was current.
func (p NodeLabelPlan) Changes(current string) bool {
	return len(p.Set) > 0 || len(p.Remove) > 0 || p.Owned != current
}

// PlanNodeLabels says how a node's labels must change under the active
// ClusterPolicy (nil: none). A GPU node gets nvidia.com/gpu.present=true
// and nvidia.com/gpu.deploy.<component>=true for each component cp
// deploys, as the GPU Operator labels its nodes. A label already on the
// node that trainops did not add is left as it is: an admin's
// nvidia.com/gpu.deploy.<component>=false keeps that component off the
// node. Labels trainops added go when no longer wanted (the ClusterPolicy
// deleted, a component disabled), unless someone changed their value since.
func PlanNodeLabels(n *corev1.Node, cp *gpuv1alpha1.ClusterPolicy) NodeLabelPlan {
	current := n.Annotations[AnnotationNodeLabels]
	var owned []string
	if current != "" {
		owned = strings.Split(current, ",")
	}
	want := map[string]bool{}
	if cp != nil && IsGPUNode(n.Labels, n.Status.Capacity) {
		want[LabelGPUPresent] = true
		for _, c := range Components(cp) {
			want[DeployLabel(c)] = true
		}
	}
	var plan NodeLabelPlan
	var keep []string
	for _, l := range owned {
		v, has := n.Labels[l]
		switch {
		case !has || v != "true" && v != PausedForMIGChange:
			// Removed or changed by someone else: theirs now.
		case want[l]:
			keep = append(keep, l)
		default:
			plan.Remove = append(plan.Remove, l)
		}
	}
	for l := range want {
		if _, has := n.Labels[l]; !has {
			plan.Set = append(plan.Set, l)
			keep = append(keep, l)
		}
	}
	slices.Sort(plan.Set)
	slices.Sort(plan.Remove)
	slices.Sort(keep)
	plan.Owned = strings.Join(keep, ",")
	return plan
}
