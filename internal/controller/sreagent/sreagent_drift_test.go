// SPDX-License-Identifier: Apache-2.0

package sreagent

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/testenv"
)

// TestSREAgentChildrenArePutBack edits an SREAgent's children by hand as
// kubectl would, and checks that each edit of a field trainops manages is
// put back within seconds, with one DriftCorrected Event naming the child
// and the fields, and the metric; that fields trainops does not manage
// stay as edited; and that a deleted child comes back.
func TestSREAgentChildrenArePutBack(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	ctx := context.Background()
	a := createAgent(t, ns, "drift", false)
	name := builder.AgentChildName(a)
	key := client.ObjectKey{Namespace: ns, Name: name}
	wantRules := builder.AgentRole(a).Rules
	if len(wantRules) == 0 {
		t.Fatal("the builder gives the agent no Role")
	}
	settled := testenv.Metric(t, "trainops_children_drift_corrected_total", "kind", "Role")

	t.Run("a Role widened by hand is put back, and the agent cannot read Secrets", func(t *testing.T) {
		role := &rbacv1.Role{}
		if err := k8s.Get(ctx, key, role); err != nil {
			t.Fatal(err)
		}
		widened := append(slices.Clone(role.Rules), rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}})
		raw, err := json.Marshal(map[string]any{"rules": widened})
		if err != nil {
			t.Fatal(err)
		}
		patch := string(raw)
		testenv.PatchAs(t, k8s, role, "kubectl-patch", types.MergePatchType, patch)
		testenv.Eventually(t, 20*time.Second, func() error {
			if err := k8s.Get(ctx, key, role); err != nil {
				return err
			}
			if len(role.Rules) != len(wantRules) {
				return fmt.Errorf("%d rules, want %d", len(role.Rules), len(wantRules))
			}
			if _, err := asAgent(t, ns, name).CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
				return fmt.Errorf("the agent lists Secrets: err %v", err)
			}
			return nil
		})
		testenv.Eventually(t, 10*time.Second, func() error {
			notes := testenv.EventNotes(t, k8s, ns, a.Name, children.ReasonDriftCorrected)
			if len(notes) != 1 || !strings.Contains(notes[0], "Role "+ns+"/"+name) || !strings.Contains(notes[0], "rules") {
				return fmt.Errorf("DriftCorrected Events %q, want one naming the Role and its rules", notes)
			}
			return nil
		})
		if got := testenv.Metric(t, "trainops_children_drift_corrected_total", "kind", "Role"); got != settled+1 {
			t.Errorf("trainops_children_drift_corrected_total{kind=Role} rose by %v, want 1", got-settled)
		}
	})

	t.Run("a Deployment scaled and re-imaged is put back; an added annotation stays", func(t *testing.T) {
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, key, d); err != nil {
			t.Fatal(err)
		}
		scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 3}}
		if err := k8s.SubResource("scale").Update(ctx, d, client.WithSubResourceBody(scale), client.FieldOwner("kubectl")); err != nil {
			t.Fatal(err)
		}
		testenv.PatchAs(t, k8s, d, "kubectl-set", types.StrategicMergePatchType,
			fmt.Sprintf(`{"metadata":{"annotations":{"team.example.com/note":"kept"}},"spec":{"template":{"spec":{"containers":[{"name":%q,"image":"registry.example.com/other:1"}]}}}}`, d.Spec.Template.Spec.Containers[0].Name))
		testenv.Eventually(t, 20*time.Second, func() error {
			if err := k8s.Get(ctx, key, d); err != nil {
				return err
			}
			if r := *d.Spec.Replicas; r != 1 {
				return fmt.Errorf("replicas %d, want 1", r)
			}
			if img := d.Spec.Template.Spec.Containers[0].Image; img != testCfg.AgentImage {
				return fmt.Errorf("image %s, want %s", img, testCfg.AgentImage)
			}
			return nil
		})
		if d.Annotations["team.example.com/note"] != "kept" {
			t.Errorf("an annotation trainops does not manage was removed: %v", d.Annotations)
		}
		testenv.Eventually(t, 10*time.Second, func() error {
			for _, n := range testenv.EventNotes(t, k8s, ns, a.Name, children.ReasonDriftCorrected) {
				// The scale and the image may be seen in one reconcile or
				// two; a second correction of the same child joins the
				// first Event's series.
				if strings.Contains(n, "Deployment "+ns+"/"+name) && (strings.Contains(n, "spec.replicas") || strings.Contains(n, "spec.template.spec.containers")) {
					return nil
				}
			}
			return fmt.Errorf("no DriftCorrected Event names the Deployment's fields: %q", testenv.EventNotes(t, k8s, ns, a.Name, children.ReasonDriftCorrected))
		})
	})

	t.Run("a RoleBinding given another subject is put back", func(t *testing.T) {
		rb := &rbacv1.RoleBinding{}
		if err := k8s.Get(ctx, key, rb); err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(rb.Subjects)
		raw, err := json.Marshal(map[string]any{"subjects": append(slices.Clone(rb.Subjects), rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns})})
		if err != nil {
			t.Fatal(err)
		}
		testenv.PatchAs(t, k8s, rb, "kubectl-patch", types.MergePatchType, string(raw))
		testenv.Eventually(t, 20*time.Second, func() error {
			if err := k8s.Get(ctx, key, rb); err != nil {
				return err
			}
			if !reflect.DeepEqual(rb.Subjects, want) {
				return fmt.Errorf("subjects %v, want %v", rb.Subjects, want)
			}
			return nil
		})
	})

	t.Run("a deleted ServiceAccount comes back", func(t *testing.T) {
		sa := &corev1.ServiceAccount{}
		if err := k8s.Get(ctx, key, sa); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Delete(ctx, sa); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 20*time.Second, func() error {
			back := &corev1.ServiceAccount{}
			if err := k8s.Get(ctx, key, back); err != nil {
				return err
			}
			if back.UID == sa.UID {
				return fmt.Errorf("not deleted yet")
			}
			return nil
		})
	})

	t.Run("settled children are not applied again", func(t *testing.T) {
		kinds := []string{"Role", "RoleBinding", "ServiceAccount", "Deployment"}
		count := func() float64 {
			var n float64
			for _, k := range kinds {
				n += testenv.Metric(t, "trainops_children_drift_corrected_total", "kind", k)
			}
			return n
		}
		r := &Reconciler{Deps: children.Deps{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("test"), Config: testCfg}}
		before := count()
		// The reconciler below reads the cache: it must see the last
		// corrections first.
		meta := metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}
		testenv.CacheCaughtUp(t, mgr.GetClient(), k8s, a, &rbacv1.Role{ObjectMeta: meta}, &rbacv1.RoleBinding{ObjectMeta: meta},
			&corev1.ServiceAccount{ObjectMeta: meta}, &appsv1.Deployment{ObjectMeta: meta})
		for range 3 {
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a)}); err != nil {
				t.Fatal(err)
			}
		}
		if after := count(); after != before {
			t.Errorf("settled children counted as drifted %v times", after-before)
		}
	})
}

// TestExternalScalingLeavesReplicasAlone: an SREAgent with
// externalScaling sets no replicas, so a HorizontalPodAutoscaler's (here:
// kubectl scale's) stay.
func TestExternalScalingLeavesReplicasAlone(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	ctx := context.Background()
	a := &aiopsv1alpha1.SREAgent{}
	testenv.LoadCase(t, testenv.Seed("gpu-monitor-agent"), a)
	a.Namespace, a.Name, a.Spec.ExternalScaling = ns, "scaled", true
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: ns, Name: builder.AgentChildName(a)}
	d := &appsv1.Deployment{}
	testenv.Eventually(t, 30*time.Second, func() error { return k8s.Get(ctx, key, d) })
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 2}}
	if err := k8s.SubResource("scale").Update(ctx, d, client.WithSubResourceBody(scale), client.FieldOwner("horizontal-pod-autoscaler")); err != nil {
		t.Fatal(err)
	}
	// A change trainops does act on: the image of the agent.
	testenv.PatchAs(t, k8s, d, "kubectl-set", types.StrategicMergePatchType,
		fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":%q,"image":"registry.example.com/other:1"}]}}}}`, d.Spec.Template.Spec.Containers[0].Name))
	testenv.Eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, key, d); err != nil {
			return err
		}
		if img := d.Spec.Template.Spec.Containers[0].Image; img != testCfg.AgentImage {
			return fmt.Errorf("image %s, want %s", img, testCfg.AgentImage)
		}
		return nil
	})
	if r := *d.Spec.Replicas; r != 2 {
		t.Errorf("replicas %d after trainops put the image back, want the autoscaler's 2", r)
	}
}
