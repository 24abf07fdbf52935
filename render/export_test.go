// SPDX-License-Identifier: Apache-2.0

package render

import (
	"context"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/render/internal/fast"
)

// BuildIsolated runs the isolated build of root's kustomization without
// the pre-scan, for the tests that prove each of its limits holds alone.
func BuildIsolated(ctx context.Context, root string, l Limits) ([]Object, error) {
	return buildIsolated(ctx, root, root, "kustomization.yaml", nil, nil, l.WithDefaults())
}

// BuildBoth scans the kustomization at path in root, then builds it with
// the fast path and with the isolated krusty build.
func BuildBoth(root, path string) (built []Object, fastErr error, krusty []Object, err error) {
	dir := filepath.Join(root, path)
	s := newScan(root, Limits{}.WithDefaults())
	if err := s.kustomization(dir, true); err != nil {
		return nil, nil, nil, err
	}
	if built, fastErr = buildFast(root, dir, s, Limits{}.WithDefaults(), nil); fastErr == nil {
		built = s.finish(built)
	}
	overlay, err := s.overlay()
	if err != nil {
		return nil, nil, nil, err
	}
	if krusty, err = buildIsolated(context.Background(), root, dir, rel(root, filepath.Join(dir, KustomizationFile(dir))), overlay, s.sources(), Limits{}.WithDefaults()); err == nil {
		krusty = s.finish(krusty)
	}
	return built, fastErr, krusty, err
}

// ErrNotFast is what the fast path says when a tree is not for it.
var ErrNotFast = fast.ErrNotFast

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

// IdleChildren is the process IDs of the render children waiting for a
// build.
func IdleChildren() []int {
	children.mu.Lock()
	defer children.mu.Unlock()
	pids := make([]int, len(children.idle))
	for i, c := range children.idle {
		pids[i] = c.cmd.Process.Pid
	}
	return pids
}
