// SPDX-License-Identifier: Apache-2.0

// Package builder computes the child objects each custom resource should
// own. Every function is pure: no client, no clock, no I/O; every input is an
// argument. The controllers apply what it returns, and `render --expand` and
// `diff` show it, so there is one answer to "what does this PyJob become".
//
// Builders return complete objects (TypeMeta included) because server-side
// apply needs the full intent.
package builder

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Labels and annotations trainops puts on what it creates.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelPartOf    = "app.kubernetes.io/part-of"
	ManagedBy      = "trainops"

	// LabelPyJob names the owning PyJob; `kubectl logs -l pyjob-name=<name>`
	// finds the training pods by it.
	LabelPyJob = "pyjob-name"
	// LabelSREAgent names the owning SREAgent.
	LabelSREAgent = "aiops.trainops.dev/sreagent"
	// LabelClusterPolicy names the owning ClusterPolicy.
	LabelClusterPolicy = "gpu.trainops.dev/clusterpolicy"
	// LabelKueueQueue submits a Job to a Kueue LocalQueue.
	LabelKueueQueue = "kueue.x-k8s.io/queue-name"
	// LabelKueuePriorityClass gives a Job the priority of a Kueue
	// WorkloadPriorityClass.
	LabelKueuePriorityClass = "kueue.x-k8s.io/priority-class"

	// AnnotationConfigHash on a pod template rolls the pods when a
	// configuration they read (not visible in the template) changes.
	AnnotationConfigHash = "gpu.trainops.dev/config-hash"
	// AnnotationRetain marks objects trainops keeps when their owner goes,
	// or when they leave Git (such as training output claims).
	AnnotationRetain = "trainops.dev/retain"
	// AnnotationAppliedHash records a hash of the configuration trainops
	// last applied to an object, so an unchanged object costs no request.
	AnnotationAppliedHash = "trainops.dev/applied-hash"

	// FieldManager is the server-side apply field manager of everything
	// trainops writes, from Git and for the children it builds.
	FieldManager = "trainops"
)

// OwnApply reports whether e is trainops's own server-side apply of an
// object itself (not of a subresource): the fields trainops sets.
func OwnApply(e metav1.ManagedFieldsEntry) bool {
	return e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == ""
}

// Options are the settings builders need beyond the custom resource.
type Options struct {
	// AgentImage runs `trainops agent` for SREAgents without spec.image.
	AgentImage string
	// DCGMURL is the metrics address of the active ClusterPolicy's DCGM
	// exporter (DCGMExporterURL), which an SREAgent with gpuEnable reads;
	// empty when no ClusterPolicy runs one.
	DCGMURL string
}

// commonLabels are on every child, with the owner's label.
func commonLabels(ownerKey, ownerName string) map[string]string {
	return map[string]string{
		LabelManagedBy: ManagedBy,
		LabelPartOf:    ManagedBy,
		ownerKey:       ownerName,
	}
}

// ownerRef makes owner the controller of a child, so deleting the owner
// garbage-collects the child and the controller watches it.
func ownerRef(gvk schema.GroupVersionKind, owner metav1.Object) []metav1.OwnerReference {
	t := true
	return []metav1.OwnerReference{{
		APIVersion:         gvk.GroupVersion().String(),
		Kind:               gvk.Kind,
		Name:               owner.GetName(),
		UID:                owner.GetUID(),
		Controller:         &t,
		BlockOwnerDeletion: &t,
	}}
}

func merge(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// Objects lists a PyJob's children in apply order.
func (c PyJobChildren) Objects() []client.Object {
	var out []client.Object
	if c.OutputClaim != nil {
		out = append(out, c.OutputClaim)
	}
	if c.Service != nil {
		out = append(out, c.Service)
	}
	return append(out, c.Job)
}

// Objects lists an SREAgent's children in apply order.
func (c SREAgentChildren) Objects() []client.Object {
	return []client.Object{c.ServiceAccount, c.Role, c.RoleBinding, c.Deployment}
}

// AllObjects lists a ClusterPolicy's children in apply order, the namespace
// and ServiceMonitor included.
func (c ClusterPolicyChildren) AllObjects() []client.Object {
	out := append([]client.Object{c.Namespace}, c.Objects...)
	if c.ServiceMonitor != nil {
		out = append(out, c.ServiceMonitor)
	}
	return out
}

// ToUnstructured converts a built object to the form that is applied and
// shown: no status, no empty creationTimestamps.
func ToUnstructured(obj client.Object) (*unstructured.Unstructured, error) {
	var u *unstructured.Unstructured
	if in, ok := obj.(*unstructured.Unstructured); ok {
		u = in.DeepCopy()
	} else {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, err
		}
		u = &unstructured.Unstructured{Object: m}
	}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "creationTimestamp")
	return u, nil
}
