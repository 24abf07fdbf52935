// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// KueueObject is a Kueue object (kueue.x-k8s.io/v1beta2) of kind, with
// spec when it is not nil.
func KueueObject(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	u.SetAPIVersion("kueue.x-k8s.io/v1beta2")
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// GPUClusterQueue is a ClusterQueue admitting from every namespace, with
// the ResourceFlavor flavor's quota of gpus GPUs (and CPU and memory
// enough for anything), and preemption as its spec.preemption (nil:
// Kueue's default, none).
func GPUClusterQueue(name, flavor string, gpus int64, preemption map[string]any) *unstructured.Unstructured {
	spec := map[string]any{
		"namespaceSelector": map[string]any{},
		"resourceGroups": []any{map[string]any{
			"coveredResources": []any{"cpu", "memory", string(GPUResource)},
			"flavors": []any{map[string]any{"name": flavor, "resources": []any{
				map[string]any{"name": "cpu", "nominalQuota": "1000"},
				map[string]any{"name": "memory", "nominalQuota": "10Ti"},
				map[string]any{"name": string(GPUResource), "nominalQuota": fmt.Sprint(gpus)},
			}}},
		}},
	}
	if preemption != nil {
		spec["preemption"] = preemption
	}
	return KueueObject("ClusterQueue", "", name, spec)
}

// SetGPUQuota sets the GPU quota in the spec of a ClusterQueue
// GPUClusterQueue made.
func SetGPUQuota(spec map[string]any, gpus int64) {
	groups := spec["resourceGroups"].([]any)
	flavors := groups[0].(map[string]any)["flavors"].([]any)
	res := flavors[0].(map[string]any)["resources"].([]any)
	res[2].(map[string]any)["nominalQuota"] = fmt.Sprint(gpus)
}
