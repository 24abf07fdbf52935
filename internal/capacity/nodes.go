// SPDX-License-Identifier: Apache-2.0

package capacity

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
)

// GPU feature discovery's labels of a node's physical GPUs and of the
// replicas time-slicing advertises each as.
const (
	countLabel    = "nvidia.com/gpu.count"
	replicasLabel = "nvidia.com/gpu.replicas"
	gpuResource   = "nvidia.com/gpu"
	sharedSuffix  = ".shared"
)

// nodeConfigLabel chooses a node's device plugin configuration among a
// ClusterPolicy's perNode ones.
const nodeConfigLabel = "nvidia.com/device-plugin.config"

// sharing is a ClusterPolicy's sharing for nodes without a perNode
// configuration; nil for none.
func sharing(p *gpuv1alpha1.ClusterPolicySpec) *gpuv1alpha1.SharingSpec {
	if p == nil || p.DevicePlugin.Config == nil {
		return nil
	}
	return p.DevicePlugin.Config.Sharing
}

// sharingFor is the sharing a ClusterPolicy gives node n: its perNode
// configuration's when its label names one, else the default.
func sharingFor(p *gpuv1alpha1.ClusterPolicySpec, n *corev1.Node) *gpuv1alpha1.SharingSpec {
	if p == nil || p.DevicePlugin.Config == nil {
		return nil
	}
	if name, ok := n.Labels[nodeConfigLabel]; ok {
		for _, c := range p.DevicePlugin.Config.PerNode {
			if c.Name == name {
				return &c.Sharing
			}
		}
	}
	return p.DevicePlugin.Config.Sharing
}

// sliced is how the device plugin advertises one time-shared resource.
type sliced struct {
	name     string
	replicas int64
	fail     bool
}

// timeSlicing is how the device plugin advertises resource (as a pod asks
// for it) under sh; nil when it is not shared.
func timeSlicing(sh *gpuv1alpha1.SharingSpec, asked string) *sliced {
	if sh == nil || sh.TimeSlicing == nil {
		return nil
	}
	ts := sh.TimeSlicing
	for _, r := range ts.Resources {
		s := &sliced{name: r.Name, replicas: int64(r.Replicas), fail: ts.FailRequestsGreaterThanOne}
		if ts.RenameByDefault {
			s.name += sharedSuffix
		}
		if s.name == asked {
			return s
		}
	}
	return nil
}

// nodeOffer is the most of each GPU resource one node offers: its
// allocatable as it is, or, under a ClusterPolicy the change brings, what
// the device plugin advertises for its physical GPUs: each shared
// resource as replicas of each GPU, named <resource>.shared when
// renameByDefault (and then not under its own name).
func nodeOffer(nodes []corev1.Node, policy *gpuv1alpha1.ClusterPolicySpec) map[string]int64 {
	out := map[string]int64{}
	for i := range nodes {
		for name, n := range NodeOffer(&nodes[i], policy) {
			out[name] = max(out[name], n)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// NodeOffer is what one node offers of each GPU resource: its
// allocatable, or under policy what the device plugin advertises for its
// physical GPUs (see nodeOffer).
func NodeOffer(n *corev1.Node, policy *gpuv1alpha1.ClusterPolicySpec) map[string]int64 {
	out := map[string]int64{}
	for name, q := range n.Status.Allocatable {
		if isGPU(string(name)) {
			out[string(name)] = q.Value()
		}
	}
	if policy == nil {
		return out
	}
	physical := physicalGPUs(n)
	if physical == 0 {
		return out
	}
	delete(out, gpuResource)
	delete(out, gpuResource+sharedSuffix)
	out[gpuResource] = physical
	if sh := sharingFor(policy, n); sh != nil && sh.TimeSlicing != nil {
		for _, r := range sh.TimeSlicing.Resources {
			if r.Name != gpuResource {
				continue
			}
			name := r.Name
			if sh.TimeSlicing.RenameByDefault {
				name += sharedSuffix
				delete(out, gpuResource)
			}
			out[name] = physical * int64(r.Replicas)
		}
	}
	return out
}

// physicalGPUs is a node's physical GPUs: GPU feature discovery's count,
// else its advertised GPUs divided by the replicas time-slicing makes of
// each.
func physicalGPUs(n *corev1.Node) int64 {
	if c, err := strconv.ParseInt(n.Labels[countLabel], 10, 64); err == nil && c > 0 {
		return c
	}
	replicas := int64(1)
	if r, err := strconv.ParseInt(n.Labels[replicasLabel], 10, 64); err == nil && r > 0 {
		replicas = r
	}
	for _, name := range []string{gpuResource, gpuResource + sharedSuffix} {
		if q, ok := n.Status.Allocatable[corev1.ResourceName(name)]; ok && q.Value() > 0 {
			return q.Value() / replicas
		}
	}
	return 0
}
