// SPDX-License-Identifier: Apache-2.0

package api_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/apicase"
	"github.com/trainops/trainops/internal/crdschema"
	"github.com/trainops/trainops/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}, &env))
}

var resources = map[string]schema.GroupVersionResource{
	trainingv1alpha1.PyJobKind:    trainingv1alpha1.GroupVersion.WithResource("pyjobs"),
	aiopsv1alpha1.SREAgentKind:    aiopsv1alpha1.GroupVersion.WithResource("sreagents"),
	gpuv1alpha1.ClusterPolicyKind: gpuv1alpha1.GroupVersion.WithResource("clusterpolicies"),
	"GitSync":                     gitopsv1alpha1.GroupVersion.WithResource("gitsyncs"),
}

// client returns the resource interface for obj, namespaced when the kind is.
func client(t *testing.T, obj *unstructured.Unstructured, ns string) dynamic.ResourceInterface {
	t.Helper()
	dc, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr, ok := resources[obj.GetKind()]
	if !ok {
		t.Fatalf("no resource for kind %q", obj.GetKind())
	}
	if obj.GetKind() == gpuv1alpha1.ClusterPolicyKind {
		return dc.Resource(gvr)
	}
	return dc.Resource(gvr).Namespace(ns)
}

// namespace creates a namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "api-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

var strict = metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}

// apply creates the case's first object and, if there is a second, updates
// to it; it returns the error of the last step and the stored object.
func apply(t *testing.T, c apicase.Case) (*unstructured.Unstructured, error) {
	t.Helper()
	ns := namespace(t)
	ctx := context.Background()
	first := c.Objects[0].DeepCopy()
	rc := client(t, first, ns)
	created, err := rc.Create(ctx, first, strict)
	if first.GetKind() == gpuv1alpha1.ClusterPolicyKind && err == nil {
		t.Cleanup(func() { _ = rc.Delete(context.Background(), created.GetName(), metav1.DeleteOptions{}) })
	}
	if len(c.Objects) == 1 || err != nil {
		if len(c.Objects) == 2 && err != nil {
			t.Fatalf("%s: creating the original object failed: %v", c.Path, err)
		}
		return created, err
	}
	update := c.Objects[1].DeepCopy()
	update.SetResourceVersion(created.GetResourceVersion())
	return rc.Update(ctx, update, metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict})
}

func TestRejectedWithActionableMessage(t *testing.T) {
	cases, err := apicase.Load(filepath.Join("..", "testdata", "api", "invalid"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if c.Want == "" {
				t.Fatalf("%s has no '# want:' line", c.Path)
			}
			_, err := apply(t, c)
			if err == nil {
				t.Fatalf("%s was accepted; want a rejection containing %q", c.Path, c.Want)
			}
			if !strings.Contains(err.Error(), c.Want) {
				t.Fatalf("%s: rejection\n  %v\ndoes not contain\n  %s", c.Path, err, c.Want)
			}
			// Offline validation must say the same thing.
			offline := validateOffline(t, c)
			if offline == nil {
				t.Fatalf("%s: the API server refused it but offline validation accepts it", c.Path)
			}
			if offline.Error() != err.Error() {
				t.Fatalf("%s: offline and API server disagree:\n  offline: %v\n  server:  %v", c.Path, offline, err)
			}
		})
	}
}

func TestAccepted(t *testing.T) {
	for _, dir := range []string{"valid", "../seeds"} {
		cases, err := apicase.Load(filepath.Join("..", "testdata", "api", dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			t.Run(c.Name, func(t *testing.T) {
				if _, err := apply(t, c); err != nil {
					t.Fatalf("%s rejected: %v", c.Path, err)
				}
				if err := validateOffline(t, c); err != nil {
					t.Fatalf("%s: accepted by the API server, refused offline: %v", c.Path, err)
				}
			})
		}
	}
}

func TestSeedsKeepEveryField(t *testing.T) {
	// Accepted is not enough: pruning would silently drop a field the API
	// does not know. Each seed must read back with every field it set.
	cases, err := apicase.Load(filepath.Join("..", "testdata", "seeds"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			got, err := apply(t, c)
			if err != nil {
				t.Fatal(err)
			}
			want, _, _ := unstructured.NestedMap(c.Objects[0].Object, "spec")
			stored, _, _ := unstructured.NestedMap(got.Object, "spec")
			if missing := missingFields("spec", want, stored); len(missing) > 0 {
				t.Fatalf("fields dropped by the API server: %v", missing)
			}
		})
	}
}

// validateOffline runs the case through the offline validator: create, then
// the update if there is one.
func validateOffline(t *testing.T, c apicase.Case) error {
	t.Helper()
	s, err := crdschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	// The API server takes the namespace from the request.
	withNS := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		u = u.DeepCopy()
		if u.GetKind() != gpuv1alpha1.ClusterPolicyKind {
			u.SetNamespace("default")
		}
		return u
	}
	first := withNS(c.Objects[0])
	if err := s.Validate(context.Background(), first, nil); err != nil || len(c.Objects) == 1 {
		return err
	}
	return s.Validate(context.Background(), withNS(c.Objects[1]), first)
}

// missingFields lists paths set in want that are absent from got.
func missingFields(path string, want, got map[string]any) []string {
	var out []string
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			out = append(out, path+"."+k)
			continue
		}
		switch wv := v.(type) {
		case map[string]any:
			gm, _ := g.(map[string]any)
			out = append(out, missingFields(path+"."+k, wv, gm)...)
		case []any:
			gl, _ := g.([]any)
			for i := range wv {
				wm, ok1 := wv[i].(map[string]any)
				if i >= len(gl) {
					out = append(out, fmt.Sprintf("%s.%s[%d]", path, k, i))
					continue
				}
				gm, ok2 := gl[i].(map[string]any)
				if ok1 && ok2 {
					out = append(out, missingFields(fmt.Sprintf("%s.%s[%d]", path, k, i), wm, gm)...)
				}
			}
		}
	}
	return out
}

// load decodes the case's stored object into a typed one.
func decode(t *testing.T, u *unstructured.Unstructured, into runtime.Object) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		t.Fatal(err)
	}
}

func TestDefaults(t *testing.T) {
	load := func(name string) apicase.Case {
		cases, err := apicase.Load(filepath.Join("..", "testdata", "api", "valid"))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no case %s", name)
		return apicase.Case{}
	}

	t.Run("PyJob", func(t *testing.T) {
		got, err := apply(t, load("pyjob-minimal"))
		if err != nil {
			t.Fatal(err)
		}
		var pj trainingv1alpha1.PyJob
		decode(t, got, &pj)
		// No restart unless asked: backoffLimit, failurePolicy.maxRestarts's
		// older name, has no default.
		if pj.Spec.GPU != 0 || pj.Spec.Workers != 1 || pj.Spec.BackoffLimit != nil {
			t.Fatalf("defaults: gpu=%d workers=%d backoffLimit=%v; want 0, 1, unset", pj.Spec.GPU, pj.Spec.Workers, pj.Spec.BackoffLimit)
		}
	})
	t.Run("SREAgent", func(t *testing.T) {
		got, err := apply(t, load("sreagent-minimal"))
		if err != nil {
			t.Fatal(err)
		}
		var a aiopsv1alpha1.SREAgent
		decode(t, got, &a)
		if a.Spec.MonitorInterval != 15 || a.Spec.Replicas == nil || *a.Spec.Replicas != 1 || a.Spec.AutoRepair || a.Spec.GPUEnable {
			t.Fatalf("defaults: %+v; want monitorInterval 15, replicas 1, autoRepair and gpuEnable off", a.Spec)
		}
	})
	t.Run("ClusterPolicy", func(t *testing.T) {
		got, err := apply(t, load("clusterpolicy-minimal"))
		if err != nil {
			t.Fatal(err)
		}
		var cp gpuv1alpha1.ClusterPolicy
		decode(t, got, &cp)
		s := cp.Spec
		checks := []struct {
			field string
			ok    bool
		}{
			{"namespace gpu-operator", s.Namespace == "gpu-operator"},
			{"priorityClassName system-node-critical", s.PriorityClassName == "system-node-critical"},
			{"driver enabled", s.Driver.Enabled != nil && *s.Driver.Enabled},
			{"driver image nvcr.io/nvidia/driver", s.Driver.Repository == "nvcr.io/nvidia" && s.Driver.Image == "driver" && s.Driver.Version != ""},
			{"driver upgrade manual, maxUnavailable 25%", !s.Driver.UpgradePolicy.AutoUpgrade && s.Driver.UpgradePolicy.MaxUnavailable != nil && s.Driver.UpgradePolicy.MaxUnavailable.String() == "25%"},
			{"toolkit enabled, CDI off", s.ContainerRuntime.Enabled != nil && *s.ContainerRuntime.Enabled && !s.ContainerRuntime.CDI.Enabled},
			{"device plugin enabled", s.DevicePlugin.Enabled != nil && *s.DevicePlugin.Enabled && s.DevicePlugin.Image != ""},
			{"MIG off, single strategy", !s.MIGManager.Enabled && s.MIGManager.Strategy == "single"},
			{"DCGM exporter on", s.DCGM.Exporter.Enabled != nil && *s.DCGM.Exporter.Enabled},
			{"ServiceMonitor on every 15s", s.DCGM.Exporter.ServiceMonitor.Enabled != nil && *s.DCGM.Exporter.ServiceMonitor.Enabled && s.DCGM.Exporter.ServiceMonitor.Interval == "15s"},
			{"rolling maxUnavailable 1", s.RollingUpdate.MaxUnavailable != nil && s.RollingUpdate.MaxUnavailable.String() == "1"},
		}
		for _, c := range checks {
			if !c.ok {
				t.Errorf("default not filled: %s (spec %+v)", c.field, s)
			}
		}
	})
}

func TestCRDsInstalledWithPrinterColumns(t *testing.T) {
	cs, err := apiextensionsclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		columns    []string
		shortName  string
		namespaced bool
	}{
		"pyjobs.training.trainops.dev":     {[]string{"Phase", "GPUs", "Workers", "Age"}, "pj", true},
		"sreagents.aiops.trainops.dev":     {[]string{"Ready", "AutoRepair", "Age"}, "sre", true},
		"clusterpolicies.gpu.trainops.dev": {[]string{"State", "Age"}, "gpupolicy", false},
		"gitsyncs.gitops.trainops.dev":     {[]string{"Ready", "Revision", "Age", "Message"}, "gs", true},
	}
	for name, w := range want {
		crd, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("CRD %s: %v", name, err)
		}
		established := false
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		if !established {
			t.Errorf("CRD %s is not Established", name)
		}
		if got := crd.Spec.Names.ShortNames; len(got) != 1 || got[0] != w.shortName {
			t.Errorf("CRD %s short names = %v, want [%s]", name, got, w.shortName)
		}
		if got := crd.Spec.Scope == apiextensionsv1.NamespaceScoped; got != w.namespaced {
			t.Errorf("CRD %s namespaced = %v, want %v", name, got, w.namespaced)
		}
		v := crd.Spec.Versions[0]
		if v.Subresources == nil || v.Subresources.Status == nil {
			t.Errorf("CRD %s has no status subresource", name)
		}
		have := map[string]bool{}
		for _, c := range v.AdditionalPrinterColumns {
			have[c.Name] = true
		}
		for _, c := range w.columns {
			if !have[c] {
				t.Errorf("CRD %s lacks printer column %q (has %v)", name, c, v.AdditionalPrinterColumns)
			}
		}
	}
}
