// SPDX-License-Identifier: Apache-2.0

package check

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/config"
)

// WorkloadPolicy bounds the power a commit can give the pods trainops
// builds: a PyJob's scheduling and Secrets, a ClusterPolicy's images
// (its DaemonSets are privileged on every GPU node: root on the nodes).
type WorkloadPolicy struct {
	// AllowedPriorityClasses, when set, are the only priorityClassName a
	// PyJob may name; when empty, any but the system-* classes, which
	// preempt the cluster's own pods.
	AllowedPriorityClasses []string
	// AllowTolerateAll lets a PyJob tolerate every taint (operator Exists
	// with no key), which schedules it onto control-plane and cordoned
	// nodes.
	AllowTolerateAll bool
	// RefuseSecretRefs refuses a PyJob whose env reads a Secret
	// (valueFrom.secretKeyRef): without it, a repository author can put
	// any Secret of the PyJob's namespace into a training pod.
	RefuseSecretRefs bool
	// AllowedRegistries are the image prefixes (registry and path) a
	// ClusterPolicy's components may come from.
	AllowedRegistries []string
	// PodPowers are the powers over its node a PyJob's pod template may
	// ask for; none unless a setting allows it.
	config.PodPowers
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

// check returns what in u the policy refuses, one message per field; nil
// when nothing.
func (p WorkloadPolicy) check(u *unstructured.Unstructured, gk schema.GroupKind) []string {
	switch gk {
	case schema.GroupKind{Group: trainingv1alpha1.GroupVersion.Group, Kind: "PyJob"}:
		return p.checkPyJob(u)
	case schema.GroupKind{Group: gpuv1alpha1.GroupVersion.Group, Kind: gpuv1alpha1.ClusterPolicyKind}:
		return p.checkClusterPolicy(u)
	}
	return nil
}

func (p WorkloadPolicy) checkPyJob(u *unstructured.Unstructured) []string {
	var out []string
	if pc, _, _ := unstructured.NestedString(u.Object, "spec", "priorityClassName"); pc != "" {
		if m := p.priorityClass(pc); m != "" {
			out = append(out, "spec.priorityClassName: "+m)
		}
	}
	tols, _, _ := unstructured.NestedSlice(u.Object, "spec", "tolerations")
	for i, t := range tols {
		m, _ := t.(map[string]any)
		if m["operator"] == "Exists" && (m["key"] == nil || m["key"] == "") && !p.AllowTolerateAll {
			out = append(out, fmt.Sprintf("spec.tolerations[%d]: %s", i, tolerateAllMessage))
		}
	}
	if p.RefuseSecretRefs {
		env, _, _ := unstructured.NestedSlice(u.Object, "spec", "env")
		for i, e := range env {
			m, _ := e.(map[string]any)
			if _, ok, _ := unstructured.NestedMap(m, "valueFrom", "secretKeyRef"); ok {
				out = append(out, fmt.Sprintf("spec.env[%d].valueFrom.secretKeyRef: %s", i, refusedSecret))
			}
		}
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "template"); ok {
		out = append(out, p.checkTemplate(u)...)
	}
	return out
}

// tolerateAllMessage refuses a toleration of every taint.
const tolerateAllMessage = "tolerating every taint (operator Exists, no key) puts training pods on control-plane and cordoned nodes: name the taint's key (or set allowTolerateAllTaints)"

// priorityClass is why the policy refuses a PyJob's priority class pc, or
// "".
func (p WorkloadPolicy) priorityClass(pc string) string {
	switch {
	case len(p.AllowedPriorityClasses) > 0 && !contains(p.AllowedPriorityClasses, pc):
		return fmt.Sprintf("%s is not allowed (allowedPriorityClasses: %s)", pc, strings.Join(p.AllowedPriorityClasses, ", "))
	case len(p.AllowedPriorityClasses) == 0 && strings.HasPrefix(pc, "system-"):
		return fmt.Sprintf("%s is the cluster's own class, which preempts its system pods: not allowed (set allowedPriorityClasses to name the classes PyJobs may use)", pc)
	}
	return ""
}

func (p WorkloadPolicy) checkClusterPolicy(u *unstructured.Unstructured) []string {
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

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// AlwaysProtected are the namespaces no sync ever writes into (or
// declares): the cluster's own. trainops's namespace is added to them.
var AlwaysProtected = []string{"kube-system", "kube-public", "kube-node-lease"}

// Policy says where a revision's objects may be and what they may ask for.
type Policy struct {
	// AllowedNamespaces, when set, are the only namespaces objects may be
	// in.
	AllowedNamespaces []string
	// ProtectedNamespaces are never written, whatever AllowedNamespaces
	// says.
	ProtectedNamespaces []string
	Workload            WorkloadPolicy
	// NamespacedOnly refuses objects of cluster-scoped kinds.
	NamespacedOnly bool
}

// ProtectedNamespaces is extra, AlwaysProtected and trainops's own
// namespace: the list a setting can only grow.
func ProtectedNamespaces(extra []string, own string) []string {
	out := append(append([]string{}, AlwaysProtected...), extra...)
	if own != "" {
		out = append(out, own)
	}
	return out
}

// writesInto is the namespace an object puts things in, and the field that
// says so when it is not metadata.namespace: a Namespace is its own; a
// ClusterPolicy, cluster-scoped, runs the GPU stack's DaemonSets in
// spec.namespace.
func writesInto(u *unstructured.Unstructured, gvk schema.GroupVersionKind) (string, string) {
	switch {
	case gvk.Group == "" && gvk.Kind == "Namespace":
		return u.GetName(), ""
	case gvk.Group == gpuv1alpha1.GroupVersion.Group && gvk.Kind == gpuv1alpha1.ClusterPolicyKind:
		ns, _, _ := unstructured.NestedString(u.Object, "spec", "namespace")
		if ns == "" {
			ns = builder.DefaultGPUNamespace
		}
		return ns, "spec.namespace: "
	}
	return u.GetNamespace(), ""
}
