// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

// TestSREAgentRepairsForReal: an SREAgent's Deployment runs trainops's own
// image (`trainops agent`) on the real node as its ServiceAccount, finds a
// crash-looping pod of its namespace and deletes it so its Deployment
// makes a new one. The same ServiceAccount, running the same agent against
// another namespace, is Forbidden there, and the crash-looping pod there is
// left alone.
func TestSREAgentRepairsForReal(t *testing.T) {
	testenv.RequireRealNode(t, env)
	ctx := context.Background()
	ns, other := newNamespace(t), newNamespace(t)
	crashLoop(t, ns)
	crashLoop(t, other)
	agent := &aiopsv1alpha1.SREAgent{
		ObjectMeta: metav1.ObjectMeta{Name: "repair", Namespace: ns},
		Spec:       aiopsv1alpha1.SREAgentSpec{AutoRepair: true, MonitorInterval: 5, Image: images.Trainops},
	}
	if err := k8s.Create(ctx, agent); err != nil {
		t.Fatal(err)
	}
	givePullSecret(t, ns, builder.AgentChildPrefix+"repair")
	first := podOf(t, ns, "flaky")
	otherFirst := podOf(t, other, "flaky")
	// The agent's Deployment becomes ready on the real node, then repairs.
	testenv.Eventually(t, 3*time.Minute, func() error {
		var d appsv1.Deployment
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.AgentChildPrefix + "repair"}, &d); err != nil {
			return err
		}
		if d.Status.ReadyReplicas < 1 {
			return fmt.Errorf("agent Deployment: %d ready; pods: %s", d.Status.ReadyReplicas, podStates(t, ns))
		}
		var evs corev1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == "AutoRepair" && e.InvolvedObject.UID == first {
				return nil
			}
		}
		return fmt.Errorf("no AutoRepair Event for pod %s yet; logs:\n%s", first, podLogs(t, ns, builder.AgentContainer))
	})
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: string(first)}, &corev1.Pod{}); err == nil {
		t.Error("the repaired pod is still there")
	}
	// The agent's identity outside its namespace.
	sa := builder.AgentChildPrefix + "repair"
	intruder := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: ns},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa,
			RestartPolicy:      corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "agent", Image: images.Trainops,
				Args: []string{"agent", "--namespace=" + other, "--monitor-interval=5s", "--auto-repair=true", "--restart-threshold=1", "--listen=0"}}},
		},
	}
	if err := k8s.Create(ctx, intruder); err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(env.Config)
	testenv.Eventually(t, 2*time.Minute, func() error {
		raw, err := cs.CoreV1().Pods(ns).GetLogs("intruder", &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return err
		}
		if !strings.Contains(strings.ToLower(string(raw)), "forbidden") || !strings.Contains(string(raw), other) {
			return fmt.Errorf("no Forbidden in %s yet:\n%s", other, raw)
		}
		return nil
	})
	if got := podOf(t, other, "flaky"); got != otherFirst {
		t.Errorf("the pod in %s was replaced (%s -> %s): the agent's identity reached outside its namespace", other, otherFirst, got)
	}
}

// givePullSecret names the registry's pull Secret on the agent's
// ServiceAccount, as a platform with a private registry does (an SREAgent
// names none of its own), and deletes the agent's pods made before, so
// their replacements pull with it.
func givePullSecret(t *testing.T, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	patch := []byte(`{"imagePullSecrets":[{"name":"` + PullSecret + `"}]}`)
	testenv.Eventually(t, time.Minute, func() error {
		return k8s.Patch(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}},
			client.RawPatch(types.MergePatchType, patch), client.FieldOwner("platform"))
	})
	if err := k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.MatchingLabels{builder.LabelSREAgent: "repair"}); err != nil {
		t.Fatal(err)
	}
}

// crashLoop makes a Deployment "flaky" in ns whose container exits 1.
func crashLoop(t *testing.T, ns string) {
	t.Helper()
	labels := map[string]string{"app": "flaky"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "flaky", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: images.Training,
					Command: []string{"sh", "-c", "echo failing; exit 1"}}}},
			},
		},
	}
	if err := k8s.Create(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}

// podOf waits for the Deployment app's one pod in ns and returns its UID.
func podOf(t *testing.T, ns, app string) types.UID {
	t.Helper()
	var uid types.UID
	testenv.Eventually(t, time.Minute, func() error {
		var pods corev1.PodList
		if err := k8s.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
			return err
		}
		var live []corev1.Pod
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				live = append(live, p)
			}
		}
		if len(live) != 1 {
			return fmt.Errorf("%d pods of %s in %s", len(live), app, ns)
		}
		uid = live[0].UID
		return nil
	})
	return uid
}

// podStates is each pod of ns with its phase and containers' states.
func podStates(t *testing.T, ns string) string {
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\n  %s %s", p.Name, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " %s: %+v", cs.Name, cs.State)
		}
	}
	return b.String()
}
