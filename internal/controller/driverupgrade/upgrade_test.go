// SPDX-License-Identifier: Apache-2.0

package driverupgrade_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/driverupgrade"
	"github.com/trainops/trainops/internal/controller/gpustack"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/gpustacktest"
)

// brokenDriver is a driver image whose pods never become ready (a kwok
// stage keeps them crash-looping): version 999.0.0 on the Ubuntu nodes.
const brokenDriver = "nvcr.io/nvidia/driver:999.0.0-ubuntu22.04"

// driverImages maps each GPU node to the image of its live driver pod
// and whether that pod is ready.
func driverImages(t *testing.T) map[string]string {
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(gpustacktest.Namespace)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Labels["app"], builder.DriverDaemonSet) && p.DeletionTimestamp.IsZero() {
			ready := slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue })
			out[p.Spec.NodeName] = fmt.Sprintf("%s ready=%v", p.Spec.Containers[0].Image, ready)
		}
	}
	return out
}

// validators maps each GPU node to the UID of its live validator pod.
func validators(t *testing.T) map[string]string {
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(gpustacktest.Namespace), client.MatchingLabels{"app": builder.ValidatorDaemonSet}); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp.IsZero() {
			out[p.Spec.NodeName] = string(p.UID)
		}
	}
	return out
}

// upgradeStates is each GPU node's upgrade state label and cordon.
func upgradeStates(t *testing.T, nodes []string) (map[string]string, map[string]bool) {
	t.Helper()
	// One list: the nodes as they all were at one moment. A node read
	// after another may have moved on, and two reads would show a state
	// no moment had.
	var list corev1.NodeList
	if err := k8s.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	states, cordoned := map[string]string{}, map[string]bool{}
	for _, n := range list.Items {
		if slices.Contains(nodes, n.Name) {
			states[n.Name] = n.Labels[driverupgrade.UpgradeStateLabel]
			cordoned[n.Name] = n.Spec.Unschedulable
		}
	}
	return states, cordoned
}

// driversSettled says why the GPU stack is not settled: the ClusterPolicy's
// status not yet of its generation or its DriverUpgraded condition not
// up to date, or a driver DaemonSet whose pods do not all run its current
// template.
func driversSettled(t *testing.T) error {
	cp := gpustacktest.Policy(t, k8s)
	if cp.Status.ObservedGeneration != cp.Generation {
		return fmt.Errorf("ClusterPolicy status of generation %d, not %d", cp.Status.ObservedGeneration, cp.Generation)
	}
	if c := conditions.Get(cp, gpustack.DriverUpgradedCondition); c != nil && c.Reason != driverupgrade.ReasonUpToDate {
		return fmt.Errorf("DriverUpgraded: %s: %s", c.Reason, c.Message)
	}
	var dss appsv1.DaemonSetList
	if err := k8s.List(context.Background(), &dss, client.InNamespace(gpustacktest.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, ds := range dss.Items {
		if !strings.HasPrefix(ds.Name, builder.DriverDaemonSet) {
			continue
		}
		s := ds.Status
		if s.ObservedGeneration != ds.Generation || s.UpdatedNumberScheduled != s.DesiredNumberScheduled || s.NumberReady != s.DesiredNumberScheduled {
			return fmt.Errorf("DaemonSet %s: generation %d observed %d, %d desired, %d at its current template, %d ready",
				ds.Name, ds.Generation, s.ObservedGeneration, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberReady)
		}
	}
	return nil
}

func setDriverVersion(t *testing.T, version string) {
	testenv.Update(t, k8s, gpustacktest.Policy(t, k8s), func(cp *gpuv1alpha1.ClusterPolicy) { cp.Spec.Driver.Version = version })
}

func TestDriverUpgradeGoesNodeByNode(t *testing.T) {
	ctx := context.Background()
	gpustacktest.LogOnFailure(t, k8s)
	gpustacktest.EnsurePolicy(t, k8s)
	nodes := env.GPUNodeNames()
	testenv.Update(t, k8s, gpustacktest.Policy(t, k8s), func(cp *gpuv1alpha1.ClusterPolicy) {
		cp.Spec.Driver.UpgradePolicy = gpuv1alpha1.DriverUpgradePolicy{AutoUpgrade: true, MaxParallelUpgrades: ptr.To(int32(1)), MaxUnavailable: ptr.To(intstr.FromString("100%")),
			Drain: gpuv1alpha1.DrainSpec{Timeout: &metav1.Duration{Duration: 20 * time.Second}}, ValidationTimeout: &metav1.Duration{Duration: 15 * time.Second}}
	})
	// Settled before the upgrade: the policy's status describes its
	// generation (the upgrade policy above included), every driver
	// DaemonSet's pods run its current template, and each node says its
	// upgrade is done. A node label alone may still be the one of before a
	// revision the controller has not seen yet.
	testenv.Eventually(t, 3*time.Minute, func() error {
		if err := driversSettled(t); err != nil {
			return fmt.Errorf("before the upgrade: %w", err)
		}
		states, _ := upgradeStates(t, nodes)
		images := driverImages(t)
		for _, n := range nodes {
			if states[n] != driverupgrade.UpgradeDone || !strings.HasSuffix(images[n], "ready=true") {
				return fmt.Errorf("before the upgrade: states %v, drivers %v", states, images)
			}
		}
		return nil
	})
	ns := testenv.NewNamespace(t, k8s)
	// The training pods have a controller, as a Job's do: podDeletion
	// evicts them by default.
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}
	if err := k8s.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		p := gpustacktest.GPUPod(ns, "train-"+n, n, nil)
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, time.Minute, func() error {
		for _, n := range nodes {
			p := &corev1.Pod{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "train-" + n}, p); err != nil || p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pod on %s not running yet", n)
			}
		}
		return nil
	})

	t.Run("a GPU pod no controller manages fails its node's upgrade, and nothing on the node is evicted", func(t *testing.T) {
		first := nodes[0]
		if err := k8s.Create(ctx, gpustacktest.GPUPod(ns, "bare", first, nil)); err != nil {
			t.Fatal(err)
		}
		setDriverVersion(t, "580.95.05")
		// The node's state is written before the policy's condition: wait
		// for both.
		testenv.Eventually(t, 2*time.Minute, func() error {
			if states, _ := upgradeStates(t, nodes); states[first] != driverupgrade.UpgradeFailed {
				return fmt.Errorf("states %v", states)
			}
			c := conditions.Get(gpustacktest.Policy(t, k8s), gpustack.DriverUpgradedCondition)
			if c == nil || c.Reason != driverupgrade.ReasonUpgradeFailed || !strings.Contains(c.Message, ns+"/bare (no controller manages it: podDeletion.force evicts it)") {
				return fmt.Errorf("DriverUpgraded: %+v", c)
			}
			return nil
		})
		for _, name := range []string{"bare", "train-" + first} {
			if !gpustacktest.PodLive(k8s, ns, name) {
				t.Errorf("pod %s on the failed node was evicted", name)
			}
		}
		// The other nodes' driver DaemonSets may get their new revision
		// after the first node failed: each is marked upgrade-required
		// once a pass sees its revision (at the latest the pass a minute
		// after the last, the rollout being stopped), and none is ever
		// cordoned.
		testenv.Eventually(t, 2*time.Minute, func() error {
			states, cordoned := upgradeStates(t, nodes)
			for _, n := range nodes[1:] {
				if cordoned[n] {
					t.Fatalf("node %s cordoned after a failed node: states %v", n, states)
				}
				if states[n] != driverupgrade.UpgradeRequired {
					return fmt.Errorf("node %s after a failed node: states %v", n, states)
				}
			}
			return nil
		})
		// Back to the running driver: the failed node is in sync again,
		// and uncordoned.
		if err := k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bare"}}); err != nil {
			t.Fatal(err)
		}
		setDriverVersion(t, "580.82.07")
		testenv.Eventually(t, time.Minute, func() error {
			states, cordoned := upgradeStates(t, nodes)
			for _, n := range nodes {
				if states[n] != driverupgrade.UpgradeDone || cordoned[n] {
					return fmt.Errorf("after going back: states %v, cordoned %v", states, cordoned)
				}
			}
			return nil
		})
	})

	t.Run("a new driver version goes one node at a time through cordon, eviction, pod replaced, validated, uncordoned", func(t *testing.T) {
		validatorsBefore := validators(t)
		setDriverVersion(t, "580.95.05")
		seen := map[string][]string{}
		cordonedWhileDraining := map[string]bool{}
		deadline := time.Now().Add(4 * time.Minute)
		for {
			states, cordoned := upgradeStates(t, nodes)
			busy := 0
			for _, n := range nodes {
				if s := states[n]; len(seen[n]) == 0 || seen[n][len(seen[n])-1] != s {
					seen[n] = append(seen[n], s)
				}
				switch states[n] {
				case driverupgrade.DrainRequired, driverupgrade.PodRestartRequired, driverupgrade.ValidationRequired:
					busy++
				}
				if states[n] == driverupgrade.DrainRequired && cordoned[n] {
					cordonedWhileDraining[n] = true
				}
			}
			if busy > 1 {
				t.Fatalf("%d nodes upgrading at once with maxParallelUpgrades 1: %v", busy, states)
			}
			images := driverImages(t)
			done := true
			for _, n := range nodes {
				done = done && states[n] == driverupgrade.UpgradeDone && strings.Contains(images[n], ":580.95.05-") && strings.HasSuffix(images[n], "ready=true") && !cordoned[n]
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rollout not done: states %v, drivers %v, seen %v", states, images, seen)
			}
			time.Sleep(100 * time.Millisecond)
		}
		for _, n := range nodes {
			if !slices.Contains(seen[n], driverupgrade.DrainRequired) || !cordonedWhileDraining[n] || seen[n][len(seen[n])-1] != driverupgrade.UpgradeDone {
				t.Errorf("node %s went through %v (cordoned while draining: %v)", n, seen[n], cordonedWhileDraining[n])
			}
			if gpustacktest.PodLive(k8s, ns, "train-"+n) {
				t.Errorf("the GPU pod on %s was not evicted", n)
			}
		}
		// Each node's validator pod was replaced, so a new one validated
		// the new driver.
		after := validators(t)
		for _, n := range nodes {
			if after[n] == "" || after[n] == validatorsBefore[n] {
				t.Errorf("node %s: validator pod %q before the upgrade, %q after: not replaced", n, validatorsBefore[n], after[n])
			}
		}
		if c := conditions.Get(gpustacktest.Policy(t, k8s), gpustack.DriverUpgradedCondition); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("DriverUpgraded: %+v", c)
		}
	})

	t.Run("a node whose driver never validates stops the rollout, the others keep their old driver", func(t *testing.T) {
		// Each OS's DaemonSet takes the new version in its own time, so
		// the node that starts first is not known; the new driver fails
		// on the Ubuntu nodes, and works on the RHEL one.
		setDriverVersion(t, "999.0.0")
		var failed string
		// The node's state is written before the policy's condition: wait
		// for both.
		testenv.Eventually(t, 2*time.Minute, func() error {
			states, _ := upgradeStates(t, nodes)
			failed = ""
			for _, n := range nodes {
				if states[n] == driverupgrade.UpgradeFailed {
					failed = n
				}
			}
			if failed == "" {
				return fmt.Errorf("states %v, drivers %v", states, driverImages(t))
			}
			c := conditions.Get(gpustacktest.Policy(t, k8s), gpustack.DriverUpgradedCondition)
			if c == nil || c.Reason != driverupgrade.ReasonUpgradeFailed || !strings.Contains(c.Message, failed+" (its new driver was not ready within validationTimeout") {
				return fmt.Errorf("DriverUpgraded: %+v", c)
			}
			return nil
		})
		// Two passes of the upgrade later, the rollout is still stopped.
		passes := testenv.Metric(t, "controller_runtime_reconcile_total", "controller", "driverupgrade")
		testenv.Eventually(t, 3*time.Minute, func() error {
			if n := testenv.Metric(t, "controller_runtime_reconcile_total", "controller", "driverupgrade"); n < passes+2 {
				return fmt.Errorf("%v upgrade passes since the node failed, want 2", n-passes)
			}
			return nil
		})
		states, cordoned := upgradeStates(t, nodes)
		images := driverImages(t)
		if !strings.Contains(images[failed], "999.0.0-ubuntu") {
			t.Errorf("node %s failed with driver %s, want the broken Ubuntu one", failed, images[failed])
		}
		waiting := 0
		for _, n := range nodes {
			switch {
			case n == failed:
			case states[n] == driverupgrade.UpgradeRequired && !cordoned[n] && strings.Contains(images[n], ":580.95.05-"):
				waiting++ // kept its old driver
			case states[n] == driverupgrade.UpgradeDone && !cordoned[n] && strings.Contains(images[n], ":999.0.0-rhel") && strings.HasSuffix(images[n], "ready=true"):
				// upgraded before the failure
			default:
				t.Errorf("node %s after a failed node: state %s, cordoned %v, driver %s", n, states[n], cordoned[n], images[n])
			}
		}
		if waiting == 0 {
			t.Errorf("no node kept its old driver: states %v, drivers %v", states, images)
		}
	})

	// Back to a driver that works, and autoUpgrade off: every label goes.
	setDriverVersion(t, "580.95.05")
	testenv.Update(t, k8s, gpustacktest.Policy(t, k8s), func(cp *gpuv1alpha1.ClusterPolicy) { cp.Spec.Driver.UpgradePolicy.AutoUpgrade = false })
	testenv.Eventually(t, 30*time.Second, func() error {
		states, cordoned := upgradeStates(t, nodes)
		for _, n := range nodes {
			if states[n] != "" || cordoned[n] {
				return fmt.Errorf("after autoUpgrade off: states %v, cordoned %v", states, cordoned)
			}
		}
		return nil
	})
}
