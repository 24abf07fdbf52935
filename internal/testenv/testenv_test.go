// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

const failingImage = "registry.example/trainer:crash"

var env *Env

func TestMain(m *testing.M) {
	os.Exit(Main(m, Options{Full: true, GPUNodes: 2, GPUsPerNode: 8, CPUNodes: 1, Stages: []string{FailImageStage(failingImage)}}, &env))
}

func clientset(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// gpuJob is an Indexed Job of pods that each ask for gpus GPUs.
func gpuJob(name, image string, pods int32, gpus int64) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: batchv1.JobSpec{
			CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Completions:    ptr.To(pods),
			Parallelism:    ptr.To(pods),
			BackoffLimit:   ptr.To(int32(1)),
			Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Tolerations:   []corev1.Toleration{{Key: string(GPUResource), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{
						Name:  "trainer",
						Image: image,
						Resources: corev1.ResourceRequirements{
							Limits: corev1.ResourceList{GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)},
						},
					}},
				},
			},
		},
	}
}

func waitJobCondition(t *testing.T, cs *kubernetes.Clientset, name string, want batchv1.JobConditionType) *batchv1.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		j, err := cs.BatchV1().Jobs("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			for _, c := range j.Status.Conditions {
				if c.Type == want && c.Status == corev1.ConditionTrue {
					return j
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job %s did not reach %s: last status %+v, err %v", name, want, j.Status, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func TestNodesAreSimulatedGPUNodes(t *testing.T) {
	cs := clientset(t)
	nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gpuNodes := 0
	for _, n := range nodes.Items {
		if !nodeReady(&n) {
			t.Errorf("node %s is not Ready", n.Name)
		}
		if n.Labels[GPUNodeLabel] == "true" {
			gpuNodes++
			if got := n.Status.Allocatable[GPUResource]; got.Value() != 8 {
				t.Errorf("node %s: allocatable %s = %s, want 8", n.Name, GPUResource, got.String())
			}
			if len(n.Spec.Taints) == 0 || n.Spec.Taints[0].Key != string(GPUResource) {
				t.Errorf("node %s: want the %s NoSchedule taint, got %v", n.Name, GPUResource, n.Spec.Taints)
			}
		}
	}
	if gpuNodes != 2 || len(nodes.Items) != 3 {
		t.Fatalf("got %d nodes, %d with GPUs; want 3 and 2", len(nodes.Items), gpuNodes)
	}
}

func TestIndexedGPUJobCompletes(t *testing.T) {
	cs := clientset(t)
	ctx := context.Background()
	if _, err := cs.BatchV1().Jobs("default").Create(ctx, gpuJob("two-by-four", "pytorch/pytorch:2.0", 2, 4), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	j := waitJobCondition(t, cs, "two-by-four", batchv1.JobComplete)
	if j.Status.Succeeded != 2 {
		t.Fatalf("succeeded = %d, want 2", j.Status.Succeeded)
	}
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=two-by-four"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		n, err := cs.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s on node %q: %v", p.Name, p.Spec.NodeName, err)
		}
		if n.Labels[GPUNodeLabel] != "true" {
			t.Errorf("pod %s ran on %s, which has no GPUs", p.Name, n.Name)
		}
	}
}

func TestGPURequestBeyondCapacityStaysPending(t *testing.T) {
	cs := clientset(t)
	ctx := context.Background()
	// 9 GPUs fit on no 8-GPU node: the scheduler must refuse, not kwok run it.
	if _, err := cs.BatchV1().Jobs("default").Create(ctx, gpuJob("too-big", "pytorch/pytorch:2.0", 1, 9), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=too-big"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					if p.Spec.NodeName != "" {
						t.Fatalf("unschedulable pod bound to %s", p.Spec.NodeName)
					}
					return
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("pod asking for 9 GPUs was never reported Unschedulable")
}

func TestFailingStageFailsJob(t *testing.T) {
	cs := clientset(t)
	if _, err := cs.BatchV1().Jobs("default").Create(context.Background(), gpuJob("crashes", failingImage, 1, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	j := waitJobCondition(t, cs, "crashes", batchv1.JobFailed)
	var reason string
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed {
			reason = c.Reason
		}
	}
	if reason != batchv1.JobReasonBackoffLimitExceeded {
		t.Fatalf("failed reason = %q, want %s", reason, batchv1.JobReasonBackoffLimitExceeded)
	}
	if j.Status.Failed != 2 {
		t.Fatalf("failed pods = %d, want 2 (backoffLimit 1 allows one retry)", j.Status.Failed)
	}
}

func TestImpersonationIsCheckedByRBAC(t *testing.T) {
	user, groups := ServiceAccountUser("default", "nobody")
	cs, err := kubernetes.NewForConfig(env.Impersonate(user, groups...))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().Secrets("default").List(context.Background(), metav1.ListOptions{})
	if err == nil {
		t.Fatal("a service account with no role listed secrets")
	}
	if want := fmt.Sprintf("User %q cannot list resource \"secrets\"", user); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}
