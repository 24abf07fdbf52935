// SPDX-License-Identifier: Apache-2.0

package render

import (
	"context"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// BuildIsolated runs the isolated build of root's kustomization without
// the pre-scan, for the tests that prove each of its limits holds alone.
func BuildIsolated(ctx context.Context, root string, l Limits) ([]Object, error) {
	return buildIsolated(ctx, root, root, "kustomization.yaml", nil, l.WithDefaults())
}

// BuildBoth scans the kustomization at path in root, then builds it with
// the fast path and with the isolated krusty build.
func BuildBoth(root, path string) (fast []Object, fastErr error, krusty []Object, err error) {
	dir := filepath.Join(root, path)
	s := newScan(root, Limits{}.WithDefaults())
	if err := s.kustomization(dir, true); err != nil {
		return nil, nil, nil, err
	}
	fast, fastErr = fastBuild(root, dir, s, Limits{}.WithDefaults(), nil)
	overlay, err := s.overlay()
	if err != nil {
		return nil, nil, nil, err
	}
	krusty, err = buildIsolated(context.Background(), root, dir, rel(root, filepath.Join(dir, KustomizationFile(dir))), overlay, Limits{}.WithDefaults())
	return fast, fastErr, krusty, err
}

// ErrNotFast is what the fast path says when a tree is not for it.
var ErrNotFast = errNotFast

// DefaultFieldSpecs are the field specs the fast path uses.
func DefaultFieldSpecs() any { return defaultSpecs() }

// ParseFieldSpecs parses kustomize's field specs as the fast path does.
func ParseFieldSpecs(b []byte) any { return mustFieldSpecs(b) }

// FieldSpecCount counts the field specs of f.
func FieldSpecCount(f any) int {
	s := f.(*fieldSpecs)
	n := len(s.NameSpace) + len(s.CommonLabels) + len(s.TemplateLabels) + len(s.VolumeClaimTemplateLabels) + len(s.CommonAnnotations)
	for _, nr := range s.NameReference {
		n += len(nr.Referrers)
	}
	return n
}

// DecodeBothWays decodes one YAML document directly and through JSON, as
// Parse would each way; ok is false when the direct decode gave way.
func DecodeBothWays(doc []byte) (direct map[string]any, ok bool, viaJSON map[string]any, err error) {
	u, ok := decodeDirect(doc)
	if ok && u != nil {
		direct = u.Object
	}
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return direct, ok, nil, err
	}
	var v unstructured.Unstructured
	if err := v.UnmarshalJSON(j); err != nil {
		return direct, ok, nil, err
	}
	return direct, ok, v.Object, nil
}

// KustomizeVersion is the kustomize release the fast path's copies follow.
const KustomizeVersion = kustomizeVersion
