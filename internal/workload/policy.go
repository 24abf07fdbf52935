// SPDX-License-Identifier: Apache-2.0

// Package workload decides what powers the pods trainops builds may have:
// a PyJob's over its node, its GPUs and its namespace's Secrets, a
// ClusterPolicy's images. It is one policy for every way an object
// arrives: the sync and the offline checks call Check on the rendered
// object, the PyJob reconciler calls PyJob on every PyJob whoever made it.
// It is pure: the namespace's Pod Security label is an argument.
package workload

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/config"
)

// Policy bounds the power a PyJob or ClusterPolicy can give the pods
// trainops builds: a PyJob's scheduling, node access, GPUs and Secrets, a
// ClusterPolicy's images (its DaemonSets are privileged on every GPU
// node: root on the nodes).
type Policy struct {
	// AllowedPriorityClasses, when set, are the only priorityClassName a
	// PyJob may name; when empty, any but the system-* classes, which
	// preempt the cluster's own pods.
	AllowedPriorityClasses []string
	// AllowTolerateAll lets a PyJob tolerate every taint (operator Exists
	// with no key), which schedules it onto control-plane and cordoned
	// nodes.
	AllowTolerateAll bool
	// RefuseSecretRefs refuses a PyJob whose pod reads a Secret: without
	// it, a repository author can put any Secret of the PyJob's namespace
	// into a training pod.
	RefuseSecretRefs bool
	// AllowedRegistries are the image prefixes (registry and path) a
	// ClusterPolicy's components may come from.
	AllowedRegistries []string
	// PodPowers are the powers over its node a PyJob's pod may ask for
	// beyond its Pod Security level; none unless a setting allows it.
	config.PodPowers
}

// Of is the policy the sync settings s make: the one the sync, the
// reconcilers and the offline commands given the same settings enforce.
func Of(s config.Sync) Policy {
	return Policy{AllowedPriorityClasses: s.AllowedPriorityClasses, AllowTolerateAll: s.AllowTolerateAllTaints,
		RefuseSecretRefs: s.RefuseSecretRefs, AllowedRegistries: s.AllowedImageRegistries, PodPowers: s.PodPowers}
}

// DefaultAllowedRegistries is NVIDIA's registry, where every GPU
// Operator component trainops deploys is published.
var DefaultAllowedRegistries = []string{"nvcr.io/nvidia"}

// clusterPolicyImages are the fields of a ClusterPolicy that name an
// image or the repository of one.
var clusterPolicyImages = [][]string{
	{"spec", "driver", "repository"},
	{"spec", "containerRuntime", "image"},
	{"spec", "devicePlugin", "image"},
	{"spec", "dcgm", "exporter", "image"},
	{"spec", "migManager", "image"},
	{"spec", "gfd", "image"},
	{"spec", "validator", "image"},
}

// Check returns what in the rendered object u the policy refuses, one
// "field: why (setting)" message each; nil when nothing. A PyJob is held
// to the platform's Pod Security level: the namespace's own label is
// applied where the PyJob is reconciled.
func (p Policy) Check(u *unstructured.Unstructured, gk schema.GroupKind) []string {
	switch gk {
	case schema.GroupKind{Group: trainingv1alpha1.GroupVersion.Group, Kind: trainingv1alpha1.PyJobKind}:
		pj := &trainingv1alpha1.PyJob{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, pj) != nil {
			// A field of the wrong type: the schema's validation names it,
			// and the API server stores no such PyJob.
			return nil
		}
		return p.PyJob(pj, "")
	case schema.GroupKind{Group: gpuv1alpha1.GroupVersion.Group, Kind: gpuv1alpha1.ClusterPolicyKind}:
		return p.checkClusterPolicy(u)
	}
	return nil
}

// priorityClass is why the policy refuses a PyJob's priority class pc, or
// "".
func (p Policy) priorityClass(pc string) string {
	switch {
	case len(p.AllowedPriorityClasses) > 0 && !slices.Contains(p.AllowedPriorityClasses, pc):
		return fmt.Sprintf("%s is not allowed (allowedPriorityClasses: %s)", pc, strings.Join(p.AllowedPriorityClasses, ", "))
	case len(p.AllowedPriorityClasses) == 0 && strings.HasPrefix(pc, "system-"):
		return fmt.Sprintf("%s is the cluster's own class, which preempts its system pods: not allowed (set allowedPriorityClasses to name the classes PyJobs may use)", pc)
	}
	return ""
}

// workloadPriorityClass says why the policy refuses the Kueue
// WorkloadPriorityClass wpc ("" when it does not): allowedPriorityClasses,
// when set, names the Kueue classes PyJobs may use too, since either kind
// of class decides which runs preempt which.
func (p Policy) workloadPriorityClass(wpc string) string {
	if len(p.AllowedPriorityClasses) > 0 && !slices.Contains(p.AllowedPriorityClasses, wpc) {
		return fmt.Sprintf("%s is not allowed (allowedPriorityClasses: %s)", wpc, strings.Join(p.AllowedPriorityClasses, ", "))
	}
	return ""
}

func (p Policy) checkClusterPolicy(u *unstructured.Unstructured) []string {
	allowed := p.AllowedRegistries
	if len(allowed) == 0 {
		allowed = DefaultAllowedRegistries
	}
	var out []string
	for _, f := range clusterPolicyImages {
		img, _, _ := unstructured.NestedString(u.Object, f...)
		if img == "" {
			continue // the default, from NVIDIA's registry
		}
		if !fromRegistry(img, allowed) {
			out = append(out, fmt.Sprintf("%s: %s is not from an allowed registry (allowedImageRegistries: %s): a ClusterPolicy's DaemonSets run privileged on every GPU node", strings.Join(f, "."), img, strings.Join(allowed, ", ")))
		}
	}
	return out
}

// fromRegistry reports whether image (or repository) is under one of the
// prefixes, at a path boundary: nvcr.io/nvidia allows
// nvcr.io/nvidia/driver, not nvcr.io/nvidia-evil/driver.
func fromRegistry(image string, prefixes []string) bool {
	for _, p := range prefixes {
		p = strings.TrimSuffix(p, "/")
		if image == p || strings.HasPrefix(image, p+"/") {
			return true
		}
	}
	return false
}
