// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func pod(name string, owned bool, mut func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}}
	if owned {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: ptr.To(true)}}
	}
	p.Status.Phase = corev1.PodRunning
	mut(&p)
	return p
}

func waiting(reason string, restarts int32, last string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		cs := corev1.ContainerStatus{Name: "trainer", Image: "img", RestartCount: restarts, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
		if last != "" {
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: last}
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	}
}

func TestInspectPods(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC)
	th := DefaultThresholds()
	pods := []corev1.Pod{
		pod("crash", true, waiting("CrashLoopBackOff", 5, "Error")),
		pod("crash-young", true, waiting("CrashLoopBackOff", 1, "Error")),
		pod("crash-bare", false, waiting("CrashLoopBackOff", 9, "Error")),
		pod("oom", true, waiting("CrashLoopBackOff", 4, "OOMKilled")),
		pod("pull", true, waiting("ImagePullBackOff", 0, "")),
		pod("pending", true, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}}
		}),
		pod("fine", true, func(*corev1.Pod) {}),
	}
	got := map[string]Finding{}
	for _, f := range InspectPods(pods, now, th) {
		got[f.Kind+"/"+f.Object.Name] = f
	}
	if len(got) != 7 {
		t.Errorf("findings %v", got)
	}
	check := func(key string, repairable bool, inMsg string) {
		t.Helper()
		f, ok := got[key]
		if !ok {
			t.Fatalf("no finding %s", key)
		}
		if f.Repairable != repairable || !strings.Contains(f.Message, inMsg) {
			t.Errorf("%s: repairable %v message %q; want %v containing %q", key, f.Repairable, f.Message, repairable, inMsg)
		}
	}
	check("CrashLoopBackOff/crash", true, "5 restarts")
	check("CrashLoopBackOff/crash-young", false, "1 restarts")
	check("CrashLoopBackOff/crash-bare", false, "has no controller")
	check("OOMKilled/oom", false, "raise resources.memory")
	check("ImagePullBackOff/pull", false, "cannot pull image img")
	check("PendingTooLong/pending", false, "Insufficient nvidia.com/gpu")
	if _, ok := got["CrashLoopBackOff/fine"]; ok {
		t.Error("healthy pod reported")
	}
}
