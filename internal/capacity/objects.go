// SPDX-License-Identifier: Apache-2.0

package capacity

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/trainops/trainops/internal/limits"
)

// Kinds the plan reads.
const (
	kueueGroup       = "kueue.x-k8s.io"
	clusterQueueKind = "ClusterQueue"
	localQueueKind   = "LocalQueue"
)

// Objects sorts objects into a plan's inputs: Kueue's ClusterQueues and
// LocalQueues, and Nodes; others are skipped.
func (in *Inputs) Objects(objs []*unstructured.Unstructured) error {
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		switch {
		case gvk.Group == kueueGroup && gvk.Kind == clusterQueueKind:
			in.ClusterQueues = append(in.ClusterQueues, u)
		case gvk.Group == kueueGroup && gvk.Kind == localQueueKind:
			in.LocalQueues = append(in.LocalQueues, u)
		case gvk.Group == "" && gvk.Kind == "Node":
			var n corev1.Node
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &n); err != nil {
				return fmt.Errorf("Node %s: %w", u.GetName(), err)
			}
			in.Nodes = append(in.Nodes, n)
		}
	}
	return nil
}

// Overlay puts a change's queues over those observed: a queue the change
// has keeps the observed one's status (what is in use) under the
// change's spec; the others are kept as observed.
func Overlay(change, observed []*unstructured.Unstructured) []*unstructured.Unstructured {
	key := func(u *unstructured.Unstructured) string {
		return u.GroupVersionKind().GroupKind().String() + "/" + u.GetNamespace() + "/" + u.GetName()
	}
	seen := map[string]*unstructured.Unstructured{}
	for _, u := range observed {
		seen[key(u)] = u
	}
	out := make([]*unstructured.Unstructured, 0, len(change)+len(observed))
	mine := map[string]bool{}
	for _, u := range change {
		u = u.DeepCopy()
		if o, ok := seen[key(u)]; ok {
			if st, ok := o.Object["status"]; ok {
				u.Object["status"] = runtime.DeepCopyJSONValue(st)
			}
		}
		mine[key(u)] = true
		out = append(out, u)
	}
	for _, u := range observed {
		if !mine[key(u)] {
			out = append(out, u)
		}
	}
	return out
}

// maxObjectsFile bounds a saved list of a cluster's objects.
const maxObjectsFile = 64 << 20

// ReadObjects reads a saved list of objects (`kubectl get clusterqueues,
// localqueues,nodes -A -o yaml`: a List, or YAML documents, or JSON).
func ReadObjects(r io.Reader) ([]*unstructured.Unstructured, error) {
	raw, err := limits.ReadAll(r, maxObjectsFile)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for i := 1; ; i++ {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.IsList() {
			list, err := u.ToList()
			if err != nil {
				return nil, fmt.Errorf("document %d: %w", i, err)
			}
			for j := range list.Items {
				out = append(out, &list.Items[j])
			}
			continue
		}
		out = append(out, u)
	}
}
