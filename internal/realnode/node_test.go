// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/trainops/trainops/internal/testenv"
)

// TestAPodRunsOnTheRealNode: a pod asking for a GPU is scheduled onto the
// real node and its container really runs (Running, with a container ID
// from containerd).
func TestAPodRunsOnTheRealNode(t *testing.T) {
	testenv.RequireRealNode(t, env)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	refs, err := testenv.Images()
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pause", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"kubernetes.io/hostname": testenv.RealNodeName},
			Containers: []corev1.Container{{Name: "pause", Image: refs["pause.tar"], ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{testenv.GPUResource: resource.MustParse("1")}}}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The node's GPUs are few: give this one back for the tests after.
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods("default").Delete(ctx, "pause", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		testenv.Eventually(t, time.Minute, func() error {
			if _, err := cs.CoreV1().Pods("default").Get(ctx, "pause", metav1.GetOptions{}); err == nil {
				return fmt.Errorf("pod pause still there")
			}
			return nil
		})
	})
	testenv.Eventually(t, time.Minute, func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "pause", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
			return fmt.Errorf("phase %s, %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		return nil
	})
}
