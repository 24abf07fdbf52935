// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainops/trainops/internal/testenv"
)

// The demo's queue: a ClusterQueue with every GPU of the simulated nodes,
// and the LocalQueue "training" the examples' queued PyJob submits to.
const (
	demoQueue         = "training"
	demoNamespace     = "ml-team"
	demoClusterQueue  = "training"
	demoFlavor        = "default-gpu"
	demoGPUs          = demoGPUNodes * demoGPUsPerNode
	demoGPUNodes      = 4
	demoGPUsPerNode   = 8
	kueueV1beta2Group = "kueue.x-k8s.io/v1beta2"
)

func kueueObject(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(kueueV1beta2Group)
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// startKueue runs Kueue with the demo's ClusterQueue.
func (d *demo) startKueue(ctx context.Context) error {
	say("starting Kueue with ClusterQueue %s (%d GPUs); the examples' queued PyJob goes through it", demoClusterQueue, demoGPUs)
	if err := d.env.StartKueue(ctx, testenv.KueueOptions{}); err != nil {
		return fmt.Errorf("start Kueue (run make testcluster): %w", err)
	}
	for _, o := range []*unstructured.Unstructured{
		kueueObject("ResourceFlavor", "", demoFlavor, map[string]any{}),
		kueueObject("ClusterQueue", "", demoClusterQueue, map[string]any{
			"namespaceSelector": map[string]any{},
			"resourceGroups": []any{map[string]any{
				"coveredResources": []any{"cpu", "memory", "nvidia.com/gpu"},
				"flavors": []any{map[string]any{"name": demoFlavor, "resources": []any{
					map[string]any{"name": "cpu", "nominalQuota": "256"},
					map[string]any{"name": "memory", "nominalQuota": "2Ti"},
					map[string]any{"name": "nvidia.com/gpu", "nominalQuota": fmt.Sprint(demoGPUs)},
				}}},
			}},
		}),
	} {
		if err := d.c.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// ensureLocalQueue creates the LocalQueue once the sync has made its
// namespace (the sync refuses to take over a namespace made before it);
// true once it exists.
func (d *demo) ensureLocalQueue(ctx context.Context) (bool, error) {
	err := d.c.Create(ctx, kueueObject("LocalQueue", demoNamespace, demoQueue, map[string]any{"clusterQueue": demoClusterQueue}))
	switch {
	case err == nil:
		say("created LocalQueue %s/%s for ClusterQueue %s", demoNamespace, demoQueue, demoClusterQueue)
		return true, nil
	case apierrors.IsAlreadyExists(err):
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil // the namespace is not there yet
	}
	return false, err
}
