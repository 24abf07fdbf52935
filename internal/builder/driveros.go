// SPDX-License-Identifier: Apache-2.0

package builder

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
)

// Node Feature Discovery's labels of a node's /etc/os-release, by which
// the driver image is chosen, as the GPU Operator chooses it.
const (
	LabelOSReleaseID = "feature.node.kubernetes.io/system-os_release.ID"
	LabelOSVersionID = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
)

// LabelDriverComponent marks the driver's DaemonSets and pods, as the GPU
// Operator marks its: the pods' anti-affinity keeps two drivers off one
// node, whichever OS each DaemonSet is for.
const (
	LabelDriverComponent = "app.kubernetes.io/component"
	DriverComponentValue = "nvidia-driver"
)

// NodeOS is a GPU node's operating system, as NFD labels it.
type NodeOS struct {
	// ID and VersionID are os-release's ID and VERSION_ID: ubuntu and
	// 22.04.
	ID, VersionID string
}

// Tag is what the GPU Operator appends to the driver version in the
// image tag: ubuntu22.04.
func (o NodeOS) Tag() string { return o.ID + o.VersionID }

// String is ID=VERSION_ID, the form ParseNodeOS reads.
func (o NodeOS) String() string { return o.ID + "=" + o.VersionID }

// ParseNodeOS reads ID=VERSION_ID (ubuntu=22.04).
func ParseNodeOS(s string) (NodeOS, error) {
	id, v, ok := strings.Cut(s, "=")
	o := NodeOS{ID: id, VersionID: v}
	if !ok || id == "" || v == "" {
		return o, fmt.Errorf("GPU node OS %q: want ID=VERSION_ID of the nodes' /etc/os-release, e.g. ubuntu=22.04", s)
	}
	for _, f := range []string{id, v} {
		if errs := validLabelValue(f); errs != "" {
			return o, fmt.Errorf("GPU node OS %q: %s", s, errs)
		}
	}
	return o, nil
}

// GPUNodes is what the GPU stack needs to know of the cluster's GPU nodes.
type GPUNodes struct {
	// OS are the distinct operating systems of the GPU nodes, sorted: each
	// gets a driver DaemonSet.
	OS []NodeOS
	// WithoutOS are the GPU nodes lacking NFD's os_release labels, sorted:
	// no driver DaemonSet selects them.
	WithoutOS []string
}

// GPUNodesOf sums up the nodes cp runs its stack on: those marked
// nvidia.com/gpu.present=true that match cp's nodeSelector.
func GPUNodesOf(cp *gpuv1alpha1.ClusterPolicy, nodes []corev1.Node) GPUNodes {
	var out GPUNodes
	sel := labels.SelectorFromSet(cp.Spec.NodeSelector)
	for _, n := range nodes {
		if n.Labels[LabelGPUPresent] != "true" || !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		o := NodeOS{ID: n.Labels[LabelOSReleaseID], VersionID: n.Labels[LabelOSVersionID]}
		if o.ID == "" || o.VersionID == "" {
			out.WithoutOS = append(out.WithoutOS, n.Name)
			continue
		}
		if !slices.Contains(out.OS, o) {
			out.OS = append(out.OS, o)
		}
	}
	sort.Slice(out.OS, func(i, j int) bool { return out.OS[i].Tag() < out.OS[j].Tag() })
	sort.Strings(out.WithoutOS)
	return out
}

// DriverDaemonSetFor is the name of the driver DaemonSet for nodes of os:
// nvidia-driver-daemonset-ubuntu22.04. It stays a valid label value (the
// DaemonSet's app label), ending in a hash of the tag when the OS's
// labels are too long.
func DriverDaemonSetFor(os NodeOS) string {
	suffix := strings.ToLower(strings.NewReplacer("_", "-").Replace(os.Tag()))
	name := DriverDaemonSet + "-" + suffix
	if len(name) <= 63 {
		return name
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(os.String()))
	return fmt.Sprintf("%s-%08x", strings.TrimRight(name[:54], "-."), h.Sum32())
}

// DriverImage is the driver image for nodes of os: the version's tag with
// the OS appended, as the GPU Operator's resolveDriverTag does. (The
// version is a tag: the CRD refuses a digest.)
func DriverImage(d gpuv1alpha1.DriverSpec, os NodeOS) string {
	return fmt.Sprintf("%s/%s:%s-%s", strings.TrimSuffix(d.Repository, "/"), d.Image, d.Version, os.Tag())
}

// driverComponents are the driver DaemonSets, one per OS of the GPU
// nodes.
func driverComponents(s gpuv1alpha1.ClusterPolicySpec, nodes GPUNodes) []component {
	var out []component
	for _, os := range nodes.OS {
		c := driverComponent(s, DriverImage(s.Driver, os))
		c.daemonSet = DriverDaemonSetFor(os)
		c.selector = map[string]string{LabelOSReleaseID: os.ID, LabelOSVersionID: os.VersionID}
		c.labels = map[string]string{LabelDriverComponent: DriverComponentValue, "nvidia.com/precompiled": "false"}
		c.affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: LabelDriverComponent, Operator: metav1.LabelSelectorOpIn, Values: []string{DriverComponentValue}}}},
				TopologyKey:   corev1.LabelHostname,
			}},
		}}
		out = append(out, c)
	}
	return out
}

// validLabelValue is the API server's rule for a label value, as a
// message; "" when v is valid.
func validLabelValue(v string) string {
	if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
		return strings.Join(errs, "; ")
	}
	return ""
}

// OfflineGPUNodes are the GPU nodes offline commands (render --expand,
// diff) expand a ClusterPolicy for when told none: Ubuntu 22.04 ones.
var OfflineGPUNodes = GPUNodes{OS: []NodeOS{{ID: "ubuntu", VersionID: "22.04"}}}
