// SPDX-License-Identifier: Apache-2.0

package clusterpolicy

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDaemonSetReady(t *testing.T) {
	ds := func(strategy appsv1.DaemonSetUpdateStrategyType, desired, ready, updated int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Generation: 1},
			Spec:       appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: strategy}},
			Status:     appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: desired, NumberReady: ready, UpdatedNumberScheduled: updated},
		}
	}
	if !daemonSetReady(ds(appsv1.RollingUpdateDaemonSetStrategyType, 2, 2, 2)) {
		t.Error("all ready and updated: want ready")
	}
	if daemonSetReady(ds(appsv1.RollingUpdateDaemonSetStrategyType, 2, 2, 1)) {
		t.Error("rolling update in progress: want not ready")
	}
	if daemonSetReady(ds(appsv1.RollingUpdateDaemonSetStrategyType, 2, 1, 2)) {
		t.Error("one pod not ready: want not ready")
	}
	if !daemonSetReady(ds(appsv1.OnDeleteDaemonSetStrategyType, 2, 2, 0)) {
		t.Error("OnDelete driver with old pods still ready: want ready")
	}
}
