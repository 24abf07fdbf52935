// SPDX-License-Identifier: Apache-2.0

package clusterpolicy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

// driverPerOS: each OS of the GPU nodes gets its driver DaemonSet, with
// the image tagged for it and selecting its nodes only, and each GPU node
// runs exactly one driver pod, that of its OS.
func driverPerOS(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, ns string) {
	ctx := context.Background()
	var nodes corev1.NodeList
	if err := k8s.List(ctx, &nodes, client.MatchingLabels{builder.LabelGPUPresent: "true"}); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != suiteGPUNodes {
		t.Fatalf("%d GPU nodes, want %d", len(nodes.Items), suiteGPUNodes)
	}
	version := getPolicy(t, cp.Name).Spec.Driver.Version
	for _, n := range nodes.Items {
		id, ver := n.Labels[builder.LabelOSReleaseID], n.Labels[builder.LabelOSVersionID]
		if id == "" || ver == "" {
			t.Fatalf("GPU node %s has no NFD OS labels: %v", n.Name, n.Labels)
		}
		name := builder.DriverDaemonSetFor(builder.NodeOS{ID: id, VersionID: ver})
		ds := &appsv1.DaemonSet{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ds); err != nil {
			t.Fatalf("node %s (%s %s): %v", n.Name, id, ver, err)
		}
		ps := ds.Spec.Template.Spec
		if want := "nvcr.io/nvidia/driver:" + version + "-" + id + ver; ps.Containers[0].Image != want {
			t.Errorf("%s runs %s, want %s", name, ps.Containers[0].Image, want)
		}
		if ps.NodeSelector[builder.LabelOSReleaseID] != id || ps.NodeSelector[builder.LabelOSVersionID] != ver {
			t.Errorf("%s selects %v, not the nodes of %s %s", name, ps.NodeSelector, id, ver)
		}
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{builder.LabelDriverComponent: builder.DriverComponentValue}); err != nil {
			return err
		}
		perNode := map[string][]string{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp.IsZero() {
				perNode[p.Spec.NodeName] = append(perNode[p.Spec.NodeName], p.Labels["app"])
			}
		}
		for _, n := range nodes.Items {
			want := builder.DriverDaemonSetFor(builder.NodeOS{ID: n.Labels[builder.LabelOSReleaseID], VersionID: n.Labels[builder.LabelOSVersionID]})
			if got := perNode[n.Name]; len(got) != 1 || got[0] != want {
				return fmt.Errorf("node %s runs driver pods %v, want one of %s", n.Name, got, want)
			}
		}
		if len(perNode) != len(nodes.Items) {
			return fmt.Errorf("driver pods on %v, want the %d GPU nodes only", perNode, len(nodes.Items))
		}
		return nil
	})
}

// validatorListsDaemonSets: acting as the validator's ServiceAccount, one
// may list the DaemonSets of the GPU namespace (the validator looks there
// for a containerised driver), and nothing beyond: not another
// namespace's, not change them.
func validatorListsDaemonSets(t *testing.T, ns string) {
	ctx := context.Background()
	as, err := client.New(env.Impersonate("system:serviceaccount:"+ns+":nvidia-operator-validator", "system:serviceaccounts", "system:serviceaccounts:"+ns, "system:authenticated"), client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	var list appsv1.DaemonSetList
	if err := as.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{builder.LabelDriverComponent: builder.DriverComponentValue}); err != nil {
		t.Fatalf("the validator cannot list the driver DaemonSets: %v", err)
	}
	if len(list.Items) == 0 {
		t.Error("the validator finds no driver DaemonSet by the GPU Operator's label")
	}
	ds := list.Items[0].DeepCopy()
	if err := as.List(ctx, &appsv1.DaemonSetList{}, client.InNamespace("kube-system")); !apierrors.IsForbidden(err) {
		t.Errorf("the validator lists kube-system's DaemonSets: %v", err)
	}
	if err := as.Delete(ctx, ds, client.DryRunAll); !apierrors.IsForbidden(err) {
		t.Errorf("the validator may delete %s: %v", ds.Name, err)
	}
}

// nodeWithoutOS: a GPU node that loses NFD's OS labels is named in the
// ClusterPolicy's status, with the labels to add, and the driver
// DaemonSet of an OS no GPU node has any more goes; the labels back, the
// driver comes back.
func nodeWithoutOS(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, ns string) {
	ctx := context.Background()
	n := testenv.Node(t, k8s, env.GPUNodeNames()[0])
	os := builder.NodeOS{ID: n.Labels[builder.LabelOSReleaseID], VersionID: n.Labels[builder.LabelOSVersionID]}
	setOS := func(id, ver *string) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s,%q:%s}}}`, builder.LabelOSReleaseID, jsonOrNull(id), builder.LabelOSVersionID, jsonOrNull(ver))
		if err := k8s.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	setOS(nil, nil)
	t.Cleanup(func() { setOS(&os.ID, &os.VersionID) })
	testenv.Eventually(t, 60*time.Second, func() error {
		got := getPolicy(t, cp.Name)
		msg := conditions.GetMessage(got, status.ReadyCondition)
		if got.Status.State != gpuv1alpha1.StateNotReady || conditions.GetReason(got, status.ReadyCondition) != ReasonNodeOSUnknown ||
			!strings.Contains(msg, n.Name) || !strings.Contains(msg, builder.LabelOSReleaseID) {
			return fmt.Errorf("state %s, %s: %q", got.Status.State, conditions.GetReason(got, status.ReadyCondition), msg)
		}
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.DriverDaemonSetFor(os)}, &appsv1.DaemonSet{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("the driver DaemonSet of %v, which no GPU node runs now: %v", os, err)
		}
		return nil
	})
	setOS(&os.ID, &os.VersionID)
	waitState(t, cp.Name, gpuv1alpha1.StateReady)
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.DriverDaemonSetFor(os)}, &appsv1.DaemonSet{}); err != nil {
		t.Errorf("the driver of %v is not back: %v", os, err)
	}
}

func jsonOrNull(s *string) string {
	if s == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *s)
}
