// SPDX-License-Identifier: Apache-2.0

// Package convert rewrites the resources of the operators trainops
// replaces into trainops's kinds: the seed operators' PyJob
// (training.example.com/v1) and SREAgent (aiops.local/v1), the NVIDIA GPU
// Operator's ClusterPolicy (nvidia.com/v1), and the GPU Operator Helm
// chart's values.yaml. It works on bytes and says, field by field, what it
// mapped, defaulted or could not map.
package convert

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/crdschema"
)

// Seeds maps the kinds of the operators trainops replaces to trainops's.
var Seeds = map[schema.GroupKind]schema.GroupVersionKind{
	{Group: "training.example.com", Kind: trainingv1alpha1.PyJobKind}: trainingv1alpha1.GroupVersion.WithKind(trainingv1alpha1.PyJobKind),
	{Group: "aiops.local", Kind: aiopsv1alpha1.SREAgentKind}:          aiopsv1alpha1.GroupVersion.WithKind(aiopsv1alpha1.SREAgentKind),
	{Group: "nvidia.com", Kind: gpuv1alpha1.ClusterPolicyKind}:        gpuv1alpha1.GroupVersion.WithKind(gpuv1alpha1.ClusterPolicyKind),
}

// Action is what convert did with one field.
type Action string

// Actions.
const (
	Mapped    Action = "mapped"
	Defaulted Action = "defaulted"
	Unmapped  Action = "not mapped"
	// Warned: kept as it is, but it will not do what it seems to.
	Warned Action = "warning"
)

// Note is what convert did with one field of one object.
type Note struct {
	Object string // "PyJob ml-team/bert-training"
	Action Action
	Field  string // in the input
	To     string // in the output, when mapped or defaulted
	Reason string
}

func (n Note) String() string {
	s := fmt.Sprintf("%s: %s %s", n.Object, n.Action, n.Field)
	if n.To != "" && n.To != n.Field {
		s += " → " + n.To
	}
	if n.Reason != "" {
		s += ": " + n.Reason
	}
	return s
}

// Options steer a conversion.
type Options struct {
	// Namespace is given to namespaced objects without one.
	Namespace string
	// KustomizationNamespace is the namespace the kustomization the file
	// belongs to sets (namespace:), if any: then objects need none.
	KustomizationNamespace string
	// Schemas are trainops's CRDs, to find fields trainops does not have.
	Schemas *crdschema.Schemas
}

// Stream converts every seed resource in a YAML stream, keeping comments
// and the other documents as they are. changed is false when the stream
// holds no seed resource (out is then in).
func Stream(in []byte, opts Options) (out []byte, notes []Note, changed bool, err error) {
	nodes, err := kio.FromBytes(in)
	if err != nil {
		return nil, nil, false, fmt.Errorf("not Kubernetes YAML: %w", err)
	}
	for _, n := range nodes {
		gv, err := schema.ParseGroupVersion(n.GetApiVersion())
		if err != nil {
			continue
		}
		to, ok := Seeds[gv.WithKind(n.GetKind()).GroupKind()]
		if !ok {
			continue
		}
		ns, err := convertNode(n, to, opts)
		notes = append(notes, ns...)
		if err != nil {
			return nil, notes, false, err
		}
		changed = true
	}
	if !changed {
		return in, nil, false, nil
	}
	s, err := kio.StringAll(nodes)
	return []byte(s), notes, true, err
}

// convertNode rewrites one seed resource into to, in place.
func convertNode(n *yaml.RNode, to schema.GroupVersionKind, opts Options) ([]Note, error) {
	id := to.Kind + " " + n.GetName()
	if ns := n.GetNamespace(); ns != "" {
		id = to.Kind + " " + ns + "/" + n.GetName()
	}
	notes := []Note{{Object: id, Action: Mapped, Field: "apiVersion " + n.GetApiVersion(), To: to.GroupVersion().String()}}
	n.SetApiVersion(to.GroupVersion().String())
	if to.Kind != gpuv1alpha1.ClusterPolicyKind && n.GetNamespace() == "" {
		notes = append(notes, namespaceNote(n, id, opts))
	}
	if to.Kind == gpuv1alpha1.ClusterPolicyKind {
		ns, err := convertPolicyNode(n, id)
		notes = append(notes, ns...)
		if err != nil {
			return notes, err
		}
	}
	ns, err := dropUnknown(n, to, id, opts.Schemas)
	notes = append(notes, ns...)
	if err != nil {
		return notes, err
	}
	spec := n.Field("spec")
	if spec != nil && to.Kind != gpuv1alpha1.ClusterPolicyKind {
		fields, _ := spec.Value.Fields()
		for _, f := range fields {
			notes = append(notes, Note{Object: id, Action: Mapped, Field: "spec." + f})
		}
	}
	if to.Kind == trainingv1alpha1.PyJobKind {
		notes = append(notes, storageWarnings(n, id)...)
	}
	return notes, nil
}

// namespaceNote gives n the namespace of opts, or says where it comes from
// or that it is missing.
func namespaceNote(n *yaml.RNode, id string, opts Options) Note {
	switch {
	case opts.Namespace != "":
		_ = n.SetNamespace(opts.Namespace)
		return Note{Object: id, Action: Defaulted, Field: "metadata.namespace", To: opts.Namespace, Reason: "from --namespace"}
	case opts.KustomizationNamespace != "":
		return Note{Object: id, Action: Defaulted, Field: "metadata.namespace", Reason: "set by the kustomization's namespace: " + opts.KustomizationNamespace}
	}
	return Note{Object: id, Action: Unmapped, Field: "metadata.namespace", Reason: "none given: pass --namespace, or set namespace: in the kustomization that lists this file"}
}

// dropUnknown removes the fields trainops's kind does not have.
func dropUnknown(n *yaml.RNode, to schema.GroupVersionKind, id string, schemas *crdschema.Schemas) ([]Note, error) {
	if schemas == nil {
		return nil, nil
	}
	m, err := toMap(n)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(to)
	unknown, err := schemas.UnknownFields(u)
	if err != nil {
		return nil, err
	}
	var notes []Note
	for _, p := range unknown {
		notes = append(notes, Note{Object: id, Action: Unmapped, Field: p, Reason: fmt.Sprintf("trainops's %s has no such field; removed", to.Kind)})
		if strings.Contains(p, "[") {
			continue // inside a list: left for validate to point at
		}
		path := strings.Split(p, ".")
		parent, err := n.Pipe(yaml.Lookup(path[:len(path)-1]...))
		if err != nil || parent == nil {
			continue
		}
		_ = parent.PipeE(yaml.Clear(path[len(path)-1]))
	}
	return notes, nil
}

// storageWarnings says when datasetPath or outputPath name a folder with
// no storage behind it (see builder.StorageWarnings).
func storageWarnings(n *yaml.RNode, id string) []Note {
	b, err := n.MarshalJSON()
	if err != nil {
		return nil
	}
	var pj trainingv1alpha1.PyJob
	if json.Unmarshal(b, &pj) != nil {
		return nil
	}
	var notes []Note
	for _, w := range builder.StorageWarnings(&pj) {
		notes = append(notes, Note{Object: id, Action: Warned, Field: w.Field, Reason: w.Message})
	}
	return notes
}

// toMap decodes n as JSON does: the value types unstructured objects hold.
func toMap(n *yaml.RNode) (map[string]any, error) {
	b, err := n.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}
