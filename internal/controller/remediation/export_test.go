// SPDX-License-Identifier: Apache-2.0

package remediation

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
)

// ReturnAll gives every node of nodes back to service, for the tests of
// package remediation_test.
func (r *Reconciler) ReturnAll(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, nodes []corev1.Node) error {
	return r.returnAll(ctx, cp, nodes)
}

// OwnTaint is ownTaint, for the tests of package remediation_test.
var OwnTaint = ownTaint
