// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

// driftEvents are the DriftCorrected Events about an object, by note.
func driftEvents(t *testing.T, ns, name string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == ReasonDriftCorrected {
			out = append(out, e.Note)
		}
	}
	return out
}

// patchAs changes obj as another field manager would, with kubectl.
func patchAs(t *testing.T, obj client.Object, manager string, typ types.PatchType, patch string) {
	t.Helper()
	if err := k8s.Patch(context.Background(), obj, client.RawPatch(typ, []byte(patch)), client.FieldOwner(manager)); err != nil {
		t.Fatal(err)
	}
}

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
	settled := testutil.ToFloat64(driftCorrected.WithLabelValues("Role"))

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
		patchAs(t, role, "kubectl-patch", types.MergePatchType, patch)
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
			notes := driftEvents(t, ns, a.Name)
			if len(notes) != 1 || !strings.Contains(notes[0], "Role "+ns+"/"+name) || !strings.Contains(notes[0], "rules") {
				return fmt.Errorf("DriftCorrected Events %q, want one naming the Role and its rules", notes)
			}
			return nil
		})
		if got := testutil.ToFloat64(driftCorrected.WithLabelValues("Role")); got != settled+1 {
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
		patchAs(t, d, "kubectl-set", types.StrategicMergePatchType,
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
			for _, n := range driftEvents(t, ns, a.Name) {
				// The scale and the image may be seen in one reconcile or
				// two; a second correction of the same child joins the
				// first Event's series.
				if strings.Contains(n, "Deployment "+ns+"/"+name) && (strings.Contains(n, "spec.replicas") || strings.Contains(n, "spec.template.spec.containers")) {
					return nil
				}
			}
			return fmt.Errorf("no DriftCorrected Event names the Deployment's fields: %q", driftEvents(t, ns, a.Name))
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
		patchAs(t, rb, "kubectl-patch", types.MergePatchType, string(raw))
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
				n += testutil.ToFloat64(driftCorrected.WithLabelValues(k))
			}
			return n
		}
		r := &SREAgentReconciler{Deps: Deps{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("test"), Config: testCfg}}
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
	loadCase(t, seed("gpu-monitor-agent"), a)
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
	patchAs(t, d, "kubectl-set", types.StrategicMergePatchType,
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

// driftTotal sums trainops_children_drift_corrected_total over every kind.
func driftTotal(t *testing.T) float64 {
	t.Helper()
	fams, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range fams {
		if f.GetName() == "trainops_children_drift_corrected_total" {
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// daemonSetPutBack: `kubectl set image` on the device plugin DaemonSet is
// put back, with an Event on the ClusterPolicy and the metric.
func daemonSetPutBack(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, ns string) {
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: builder.DevicePluginDaemonSet}
	ds := &appsv1.DaemonSet{}
	if err := k8s.Get(ctx, key, ds); err != nil {
		t.Fatal(err)
	}
	image := ds.Spec.Template.Spec.Containers[0].Image
	before := testutil.ToFloat64(driftCorrected.WithLabelValues("DaemonSet"))
	patchAs(t, ds, "kubectl-set", types.StrategicMergePatchType, fmt.Sprintf(
		`{"spec":{"template":{"spec":{"containers":[{"name":%q,"image":"registry.example.com/device-plugin:evil"}]}}}}`, ds.Spec.Template.Spec.Containers[0].Name))
	testenv.Eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, key, ds); err != nil {
			return err
		}
		if got := ds.Spec.Template.Spec.Containers[0].Image; got != image {
			return fmt.Errorf("image %s, want %s", got, image)
		}
		return nil
	})
	if got := testutil.ToFloat64(driftCorrected.WithLabelValues("DaemonSet")); got < before+1 {
		t.Errorf("trainops_children_drift_corrected_total{kind=DaemonSet} did not rise")
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, n := range driftEvents(t, "", cp.Name) {
			if strings.Contains(n, "DaemonSet "+ns+"/"+builder.DevicePluginDaemonSet) && strings.Contains(n, "spec.template.spec.containers") {
				return nil
			}
		}
		return fmt.Errorf("no DriftCorrected Event on the ClusterPolicy names the DaemonSet's containers")
	})
	waitState(t, cp.Name, gpuv1alpha1.StateReady)
}

// TestOutdatedJobIsNotFought: a PyJob's Job built from an earlier
// configuration (another image in its pod template, another applied hash),
// as after an upgrade of trainops, cannot be changed in place. The PyJob
// says so in its JobUpToDate condition, does not stall, and the Job runs
// as created.
func TestOutdatedJobIsNotFought(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	ctx := context.Background()
	pj := &trainingv1alpha1.PyJob{}
	loadCase(t, seed("distributed-training"), pj)
	pj.Namespace, pj.Name = ns, "outdated"
	// Only this test reconciles it.
	pj.Labels = map[string]string{isolatedLabel: "true"}
	pj.Spec.Suspend = ptr.To(true)
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	old := testenv.PyJobChildren(t, pj).Job
	old.Spec.Template.Spec.Containers[0].Image = "registry.example.com/trainer:old"
	old.Annotations = map[string]string{builder.AnnotationAppliedHash: "0000000000000000"}
	if err := k8s.Create(ctx, old, client.FieldOwner(builder.FieldManager)); err != nil {
		t.Fatal(err)
	}
	r := &PyJobReconciler{Deps: Deps{Client: k8s, Recorder: mgr.GetEventRecorder("test"), Config: testCfg}}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pj)}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	got := getPyJob(t, ns, pj.Name)
	c := conditions.Get(got, JobUpToDateCondition)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonImmutable || !strings.Contains(c.Message, old.Name) || !strings.Contains(c.Message, "new name") {
		t.Fatalf("JobUpToDate %+v, want False/Immutable naming the Job and what to do", c)
	}
	if conditions.IsStalled(got) || got.Status.ObservedGeneration != got.Generation {
		t.Errorf("stalled %v, observedGeneration %d of %d: an outdated Job is no failure", conditions.IsStalled(got), got.Status.ObservedGeneration, got.Generation)
	}
	job := &batchv1.Job{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(old), job); err != nil {
		t.Fatal(err)
	}
	if img := job.Spec.Template.Spec.Containers[0].Image; img != "registry.example.com/trainer:old" || job.UID != old.UID {
		t.Errorf("the Job was replaced or changed: image %s", img)
	}
}

// stackPutBack edits, as kubectl would, one field trainops manages in the
// GPU stack's ConfigMap and Service, and checks
// each is put back with its own DriftCorrected Event, while a label added
// beside trainops's stays.
func stackPutBack(t *testing.T, cp *gpuv1alpha1.ClusterPolicy, ns string) {
	ctx := context.Background()
	cases := []struct {
		kind  string
		obj   client.Object
		patch string
		// field reads the edited field back.
		field []string
	}{
		{"ConfigMap", &corev1.ConfigMap{}, `{"metadata":{"labels":{"team.example.com/owner":"ml"}},"data":{"config.yaml":"version: v1\n"}}`, []string{"data", "config.yaml"}},
		{"Service", &corev1.Service{}, `{"metadata":{"labels":{"team.example.com/owner":"ml"}},"spec":{"selector":{"app":"something-else"}}}`, []string{"spec", "selector", "app"}},
	}
	names := map[string]string{"ConfigMap": builder.DevicePluginConfigMap, "Service": builder.DCGMExporterService}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			key := client.ObjectKey{Namespace: ns, Name: names[tc.kind]}
			read := func() map[string]any {
				if err := k8s.Get(ctx, key, tc.obj); err != nil {
					t.Fatal(err)
				}
				m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tc.obj)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			before, _, _ := unstructured.NestedFieldNoCopy(read(), tc.field...)
			patchAs(t, tc.obj, "kubectl-patch", types.MergePatchType, tc.patch)
			testenv.Eventually(t, 20*time.Second, func() error {
				now, _, _ := unstructured.NestedFieldNoCopy(read(), tc.field...)
				if !reflect.DeepEqual(now, before) {
					return fmt.Errorf("%s not put back: %v, want %v", strings.Join(tc.field, "."), now, before)
				}
				return nil
			})
			if got := tc.obj.GetLabels()["team.example.com/owner"]; got != "ml" {
				t.Errorf("a label trainops does not manage was removed (%q)", got)
			}
			testenv.Eventually(t, 10*time.Second, func() error {
				for _, n := range driftEvents(t, "", cp.Name) {
					if strings.Contains(n, tc.kind+" "+ns+"/"+names[tc.kind]) {
						return nil
					}
				}
				return fmt.Errorf("no DriftCorrected Event names %s %s", tc.kind, names[tc.kind])
			})
		})
	}
	waitState(t, cp.Name, gpuv1alpha1.StateReady)
}
