package render

import "context"

// BuildIsolated runs the isolated build of root's kustomization without
// the pre-scan, for the tests that prove each of its limits holds alone.
func BuildIsolated(ctx context.Context, root string, l Limits) ([]Object, error) {
	return buildIsolated(ctx, root, root, "kustomization.yaml", nil, l.WithDefaults())
}
