// SPDX-License-Identifier: Apache-2.0

package sreagent

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	"github.com/trainops/trainops/internal/status"
)

func TestSREAgentStatus(t *testing.T) {
	dep := func(mut func(*appsv1.Deployment)) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "a", Generation: 2}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(2))}}
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}}}
		if mut != nil {
			mut(d)
		}
		return d
	}
	for _, tc := range []struct {
		name  string
		d     *appsv1.Deployment
		ready bool
	}{
		{"available", dep(nil), true},
		{"not created", nil, false},
		{"old generation", dep(func(d *appsv1.Deployment) { d.Status.ObservedGeneration = 1 }), false},
		{"rolling", dep(func(d *appsv1.Deployment) { d.Status.UpdatedReplicas = 1 }), false},
		{"unavailable", dep(func(d *appsv1.Deployment) {
			d.Status.AvailableReplicas = 0
			d.Status.Conditions[0].Status = corev1.ConditionFalse
		}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &aiopsv1alpha1.SREAgent{}
			applySREAgentStatus(a, tc.d)
			got := false
			for _, c := range a.Status.Conditions {
				if c.Type == status.ReadyCondition && c.Status == metav1.ConditionTrue {
					got = true
				}
			}
			if got != tc.ready {
				t.Fatalf("ready %v, want %v: %+v", got, tc.ready, a.Status.Conditions)
			}
		})
	}
}
