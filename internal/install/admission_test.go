// SPDX-License-Identifier: Apache-2.0

package install

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/scheme"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/workload"
	"github.com/trainops/trainops/internal/workload/workloadtest"
	"github.com/trainops/trainops/render"
)

// admissionCluster is a control plane with the installation's admission
// policy and binding, an admin client and a client acting as a user who
// may create and update PyJobs in ns and nothing else.
type admissionCluster struct {
	admin, author client.Client
	ns            string
}

func startAdmission(t *testing.T) admissionCluster {
	t.Helper()
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	s := scheme.New()
	admin, err := client.New(env.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := Manifests(Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	var installed int
	for _, u := range objs {
		switch u.GetKind() {
		case "Namespace", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if err := admin.Create(ctx, u); err != nil {
				t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
			}
			installed++
		}
	}
	if installed != 3 {
		t.Fatalf("the installation holds %d of Namespace, ValidatingAdmissionPolicy and binding, want 3", installed)
	}
	ns := testenv.NewNamespace(t, admin)
	author := env.PyJobAuthor(t, admin, ns)
	return admissionCluster{admin: admin, author: author, ns: ns}
}

// publish writes p's settings where trainops publishes them, as it does.
func (a admissionCluster) publish(t *testing.T, p workload.Policy) {
	t.Helper()
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "trainops-system", Name: config.PolicyConfigMap},
		Data:       p.AdmissionParams()}
	if err := a.admin.Patch(context.Background(), cm, client.Apply, client.FieldOwner("test"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
}

// admitted creates pj as the PyJob author (dry run unless store) and
// returns the API server's refusal, or nil.
func (a admissionCluster) create(pj *trainingv1alpha1.PyJob, store bool) error {
	var opts []client.CreateOption
	if !store {
		opts = append(opts, client.DryRunAll)
	}
	err := a.author.Create(context.Background(), pj.DeepCopy(), opts...)
	if err != nil && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		return fmt.Errorf("not a refusal: %w", err)
	}
	return err
}

// refusedByReconcilerOnly are the cases the admission policy leaves to
// the reconciler: the Pod Security Standards, whose level depends on the
// namespace's label and are evaluated by Kubernetes' own code there.
func refusedByReconcilerOnly(c workloadtest.Case) bool { return c.Field == "spec.template.spec" }

// TestAdmissionPolicyRefusesWhatTheReconcilerRefuses runs the installed
// ValidatingAdmissionPolicy, on a real API server, and the reconciler's
// workload policy on the same cases with the same settings: whatever the
// API server refuses, the reconciler refuses; every case the reconciler
// refuses for a reason the API server can decide alone is refused at
// admission, naming the field and the setting, and nothing is stored; the
// setting that allows a case lets it through both.
func TestAdmissionPolicyRefusesWhatTheReconcilerRefuses(t *testing.T) {
	a := startAdmission(t)
	ctx := context.Background()
	strict := workload.Policy{}
	for _, c := range workloadtest.Cases {
		if c.Under != nil {
			c.Under(&strict)
		}
	}
	a.publish(t, strict)
	clean, err := workloadtest.Case{Name: "clean", Spec: "gpu: 1\n"}.PyJob(a.ns, "clean")
	if err != nil {
		t.Fatal(err)
	}
	// The binding reads the published settings once its informer has them:
	// the first refusal of a case proves the API server applies them.
	probe, err := workloadtest.Cases[0].PyJob(a.ns, "probe")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if a.create(probe, false) == nil {
			return errors.New("the API server does not apply the published settings yet")
		}
		return nil
	})
	if err := a.create(clean, true); err != nil {
		t.Fatalf("a PyJob asking for nothing the policy refuses: %v", err)
	}
	cases := append(append([]workloadtest.Case{}, workloadtest.Cases...), reservedTaintCases()...)
	for i, c := range cases {
		pj, err := c.PyJob(a.ns, fmt.Sprintf("case-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		admission := a.create(pj, true)
		reconciler := strings.Join(strict.PyJob(pj, ""), "\n")
		switch {
		case admission != nil && reconciler == "":
			t.Errorf("%s: refused at admission (%v), admitted by the reconciler's policy", c.Name, admission)
		case refusedByReconcilerOnly(c):
			if admission != nil {
				t.Errorf("%s: refused at admission (%v): a Pod Security case is the reconciler's", c.Name, admission)
			}
		case admission == nil:
			t.Errorf("%s: admitted; the reconciler refuses it (%s)", c.Name, reconciler)
		case !strings.Contains(admission.Error(), c.Field) || !strings.Contains(admission.Error(), c.Setting):
			t.Errorf("%s: the refusal names not %s and %s: %v", c.Name, c.Field, c.Setting, admission)
		default:
			if err := a.admin.Get(ctx, client.ObjectKeyFromObject(pj), &trainingv1alpha1.PyJob{}); !apierrors.IsNotFound(err) {
				t.Errorf("%s: refused, yet stored: %v", c.Name, err)
			}
		}
	}
	for _, c := range workloadtest.Restricted {
		pj, err := c.PyJob(a.ns, "restricted")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.create(pj, false); err != nil {
			t.Errorf("%s: refused at admission at the platform's baseline: %v", c.Name, err)
		}
	}
	updatesAreTheCRDs(t, a, clean)
	allowedByBoth(t, a, cases)
}

// reservedTaintCases are a toleration of each reserved taint, so the
// admission policy's list is held to the reconciler's whole list.
func reservedTaintCases() []workloadtest.Case {
	var out []workloadtest.Case
	for _, key := range workload.ReservedTaints {
		out = append(out, workloadtest.Case{Name: "toleration of " + key, Spec: fmt.Sprintf("tolerations: [{key: %q, operator: Exists}]\n", key),
			Field: "spec.tolerations[0].key", Setting: "allowReservedTolerations",
			Allow: func(p *workload.Policy) { p.AllowReservedTolerations = true }})
	}
	return out
}

// updatesAreTheCRDs: a created PyJob's spec cannot change (the CRD's
// rules), so the policy checks creation only; a PyJob created under
// settings since made stricter can still have its metadata updated (the
// reconciler's finalizer), and is held by the reconciler alone.
func updatesAreTheCRDs(t *testing.T, a admissionCluster, clean *trainingv1alpha1.PyJob) {
	ctx := context.Background()
	pj := &trainingv1alpha1.PyJob{}
	if err := a.author.Get(ctx, client.ObjectKeyFromObject(clean), pj); err != nil {
		t.Fatal(err)
	}
	pj.Spec.Template = &runtime.RawExtension{Raw: []byte(`{"spec":{"hostPID":true}}`)}
	if err := a.author.Update(ctx, pj); err == nil {
		t.Fatal("an update of a PyJob's template to hostPID was stored")
	}
	if err := a.admin.Get(ctx, client.ObjectKeyFromObject(clean), pj); err != nil || pj.Spec.Template != nil {
		t.Fatalf("after the refused update: template %v (%v), want none", pj.Spec.Template, err)
	}
	c := workloadtest.Cases[slices.IndexFunc(workloadtest.Cases, func(c workloadtest.Case) bool { return c.Name == "hostPID" })]
	old, err := c.PyJob(a.ns, "made-before")
	if err != nil {
		t.Fatal(err)
	}
	a.publish(t, workload.Policy{PodPowers: config.PodPowers{AllowHostNamespaces: true}})
	testenv.Eventually(t, 30*time.Second, func() error { return a.create(old, true) })
	probe, err := c.PyJob(a.ns, "probe-strict")
	if err != nil {
		t.Fatal(err)
	}
	a.publish(t, workload.Policy{})
	testenv.Eventually(t, 30*time.Second, func() error {
		if a.create(probe, false) == nil {
			return errors.New("the stricter settings are not applied yet")
		}
		return nil
	})
	testenv.Update(t, a.admin, old, func(pj *trainingv1alpha1.PyJob) {
		pj.Finalizers = append(pj.Finalizers, "training.trainops.dev/test")
	})
}

// allowedByBoth publishes, for each case a setting allows, that setting:
// the API server admits the case and the reconciler's policy with the
// same settings refuses nothing of it.
func allowedByBoth(t *testing.T, a admissionCluster, cases []workloadtest.Case) {
	for i, c := range cases {
		if c.Allow == nil {
			continue
		}
		p := workload.Policy{}
		if c.Under != nil {
			c.Under(&p)
		}
		c.Allow(&p)
		a.publish(t, p)
		pj, err := c.PyJob(a.ns, fmt.Sprintf("allowed-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if msgs := p.PyJob(pj, ""); len(msgs) > 0 && !refusedByReconcilerOnly(c) {
			t.Errorf("%s: with its setting, the reconciler still refuses: %v", c.Name, msgs)
		}
		testenv.Eventually(t, 30*time.Second, func() error {
			if err := a.create(pj, false); err != nil {
				return fmt.Errorf("%s: with its setting published, still refused: %w", c.Name, err)
			}
			return nil
		})
	}
}
