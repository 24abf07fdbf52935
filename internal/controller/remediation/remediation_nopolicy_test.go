// SPDX-License-Identifier: Apache-2.0

package remediation_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/controller/remediation"
)

// TestNodeReturnedWithoutClusterPolicy: with no ClusterPolicy, a node
// carrying trainops's remediation taint is given back (taint and cordon
// gone) without a panic, its NodeReturned Event on the node alone.
func TestNodeReturnedWithoutClusterPolicy(t *testing.T) {
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "tainted-", Annotations: map[string]string{
		gpuv1alpha1.RemediationAnnotation: `{"since":"2026-12-01T00:00:00Z","cause":"xid-79","cordoned":true}`,
	}}, Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: gpuv1alpha1.RemediationTaintKey, Value: "xid-79", Effect: corev1.TaintEffectNoSchedule}}}}
	if err := k8s.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
	r := &remediation.Reconciler{Deps: children.Deps{Client: k8s, Recorder: events.NewFakeRecorder(16)}}
	// The node lifecycle controller writes the new node too: read it
	// again on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &corev1.Node{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(n), cur); err != nil {
			return err
		}
		return r.ReturnAll(ctx, nil, []corev1.Node{*cur})
	}); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Node{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(n), got); err != nil {
		t.Fatal(err)
	}
	if _, tainted := remediation.OwnTaint(got); tainted || got.Spec.Unschedulable {
		t.Errorf("node still out of service: taints %v, unschedulable %v", got.Spec.Taints, got.Spec.Unschedulable)
	}
}
