// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/ctrltest"
	"github.com/trainops/trainops/internal/workload"
	"github.com/trainops/trainops/internal/workload/workloadtest"
)

// TestPolicyHoldsForPyJobsMadeDirectly: every case of the workload policy,
// created with the API by a user who may create PyJobs only, is Stalled
// with reason Refused naming the field and the setting, with a Refused
// Event, and has no Job, no Service, no claim and no pod; with the
// setting that allows it, the same case gets its Job.
func TestPolicyHoldsForPyJobsMadeDirectly(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	as := env.PyJobAuthor(t, k8s, ns)
	names := map[string]workloadtest.Case{}
	for i, c := range workloadtest.Cases {
		pj, err := c.PyJob(ns, fmt.Sprintf("case-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		pj.Spec.Workers = 2 // a Service too, were it built
		if err := as.Create(ctx, pj); err != nil {
			t.Fatalf("%s: create as the PyJob author: %v", c.Name, err)
		}
		names[pj.Name] = c
	}
	for name, c := range names {
		// The Stalled condition and the Event are the reconciler's: it saw
		// the PyJob before anything below is looked for.
		testenv.Eventually(t, 60*time.Second, func() error {
			pj := getPyJob(t, ns, name)
			msg := conditions.GetMessage(pj, status.StalledCondition)
			if conditions.GetReason(pj, status.StalledCondition) != ReasonRefused || !strings.Contains(msg, c.Field) || !strings.Contains(msg, c.Setting) {
				return fmt.Errorf("%s: Stalled %q: %q", c.Name, conditions.GetReason(pj, status.StalledCondition), msg)
			}
			if conditions.IsReady(pj) || pj.Status.Message != msg {
				return fmt.Errorf("%s: Ready %v, message %q", c.Name, conditions.IsReady(pj), pj.Status.Message)
			}
			if note, ok := testenv.EventReasons(t, k8s, ns, name)[ReasonRefused]; !ok || !strings.Contains(note, c.Field) {
				return fmt.Errorf("%s: no Refused Event naming %s (%q)", c.Name, c.Field, note)
			}
			return nil
		})
	}
	for _, o := range []client.ObjectList{&batchv1.JobList{}, &corev1.ServiceList{}, &corev1.PersistentVolumeClaimList{}, &corev1.PodList{}} {
		if err := k8s.List(ctx, o, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if n := meta.LenList(o); n != 0 {
			t.Errorf("%T: %d objects of refused PyJobs", o, n)
		}
	}
	allowedGetTheirJob(t, ns)
}

// allowedGetTheirJob reconciles each case with the setting that allows it
// (a reconciler of the test's own, on PyJobs the shared manager leaves
// alone): each gets its Job.
func allowedGetTheirJob(t *testing.T, ns string) {
	ctx := context.Background()
	for i, c := range workloadtest.Cases {
		if c.Allow == nil {
			continue
		}
		policy := testPolicy
		c.Allow(&policy)
		pj, err := c.PyJob(ns, fmt.Sprintf("allowed-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		pj.Labels = map[string]string{ctrltest.IsolatedLabel: "true"}
		if err := k8s.Create(ctx, pj); err != nil {
			t.Fatal(err)
		}
		r := &Reconciler{Deps: children.Deps{Client: k8s, Recorder: mgr.GetEventRecorder("test"), Config: testCfg}, Policy: policy}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pj)}); err != nil {
			t.Errorf("%s, allowed: Reconcile: %v", c.Name, err)
			continue
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.JobName(pj)}, &batchv1.Job{}); err != nil {
			t.Errorf("%s, allowed: no Job: %v", c.Name, err)
		}
	}
}

// TestNamespaceLabelTightens: in a namespace labelled
// pod-security.kubernetes.io/enforce=restricted, a PyJob that baseline
// allows is Stalled, naming the label.
func TestNamespaceLabelTightens(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	testenv.Update(t, k8s, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, func(n *corev1.Namespace) {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[workload.EnforceLabel] = "restricted"
	})
	c := workloadtest.Restricted[0]
	pj, err := c.PyJob(ns, "root")
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		got := getPyJob(t, ns, pj.Name)
		if msg := conditions.GetMessage(got, status.StalledCondition); !strings.Contains(msg, workload.EnforceLabel) || !strings.Contains(msg, "level restricted") {
			return fmt.Errorf("Stalled: %q", msg)
		}
		return nil
	})
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.JobName(pj)}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("Job of a refused PyJob: %v", err)
	}
}

// TestVerdictsAreKeptPerPyJobGenerationAndLabel: the policy's answer is
// reused only for the same PyJob (UID), generation and namespace label.
func TestVerdictsAreKeptPerPyJobGenerationAndLabel(t *testing.T) {
	var v verdicts
	pj := &trainingv1alpha1.PyJob{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "j", UID: "u1", Generation: 1}}
	v.put(pj, "", []string{"refused"})
	if got, ok := v.get(pj, ""); !ok || len(got) != 1 {
		t.Fatalf("the same PyJob: %v %v", got, ok)
	}
	for name, change := range map[string]func(*trainingv1alpha1.PyJob) string{
		"a new generation":      func(p *trainingv1alpha1.PyJob) string { p.Generation = 2; return "" },
		"a PyJob of a new UID":  func(p *trainingv1alpha1.PyJob) string { p.UID = "u2"; return "" },
		"a new namespace label": func(*trainingv1alpha1.PyJob) string { return "restricted" },
	} {
		other := pj.DeepCopy()
		if _, ok := v.get(other, change(other)); ok {
			t.Errorf("%s reused the old answer", name)
		}
	}
	v.forget(client.ObjectKeyFromObject(pj))
	if _, ok := v.get(pj, ""); ok {
		t.Error("a forgotten PyJob's answer was kept")
	}
}
