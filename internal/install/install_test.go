// SPDX-License-Identifier: Apache-2.0

package install

import (
	"fmt"

	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/render"
)

func TestEmbeddedInstallEqualsConfigDefault(t *testing.T) {
	got, err := Manifests(Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Render("../..", "config/default")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, strings.TrimSpace(string(b)))
	}
	parsed, err := render.Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, u := range parsed {
		b, _ := yaml.Marshal(u.Object)
		have = append(have, strings.TrimSpace(string(b)))
	}
	if d := cmp.Diff(want, have); d != "" {
		t.Fatalf("trainops install differs from kustomize build config/default (-config +install):\n%s", d)
	}
	if len(have) < 10 {
		t.Fatalf("only %d objects", len(have))
	}
}

func TestInstallOptions(t *testing.T) {
	got, err := Manifests(Options{Namespace: "ml-ops", Repo: "https://git.example/ml/c.git", Branch: "prod", Path: "clusters/prod"})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	foundConfig, foundBinding := false, false
	for _, o := range objs {
		if o.GetKind() == "ValidatingAdmissionPolicyBinding" {
			foundBinding = true
			if ns, _, _ := unstructured.NestedString(o.Object, "spec", "paramRef", "namespace"); ns != "ml-ops" {
				t.Errorf("the admission policy reads its settings in namespace %q, want ml-ops", ns)
			}
		}
		if o.GetNamespace() == "trainops-system" || (o.GetKind() == "Namespace" && o.GetName() != "ml-ops") {
			t.Errorf("%s %s/%s left in trainops-system", o.GetKind(), o.GetNamespace(), o.GetName())
		}
		if o.GetKind() == "ConfigMap" && o.GetName() == "trainops-config" {
			foundConfig = true
			cfg, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
			for _, w := range []string{"url: https://git.example/ml/c.git", "branch: prod", "path: clusters/prod"} {
				if !strings.Contains(cfg, w) {
					t.Errorf("config.yaml lacks %q:\n%s", w, cfg)
				}
			}
		}
		if o.GetKind() == "ClusterRoleBinding" || o.GetKind() == "RoleBinding" {
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, s := range subjects {
				if ns := s.(map[string]any)["namespace"]; ns != "ml-ops" {
					t.Errorf("%s %s binds a subject in %v", o.GetKind(), o.GetName(), ns)
				}
			}
		}
	}
	if !foundConfig || !foundBinding {
		t.Fatalf("trainops-config ConfigMap: %v, admission policy binding: %v", foundConfig, foundBinding)
	}
}

func TestInstallIsLeastPrivilegeAndHardened(t *testing.T) {
	out, err := Manifests(Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	var deployments int
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole", "Role":
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				rule := r.(map[string]any)
				for _, field := range []string{"verbs", "resources", "apiGroups"} {
					vals, _ := rule[field].([]any)
					for _, v := range vals {
						if v == "*" {
							t.Errorf("%s %s has a wildcard in %s: %v", o.GetKind(), o.GetName(), field, rule)
						}
					}
				}
			}
		case "Deployment":
			deployments++
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			ps := d.Spec.Template.Spec
			c := ps.Containers[0]
			switch {
			case d.Spec.Replicas == nil || *d.Spec.Replicas != 2:
				t.Error("want 2 replicas (leader-elected)")
			case c.LivenessProbe == nil || c.ReadinessProbe == nil:
				t.Error("probes missing")
			case ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot:
				t.Error("not runAsNonRoot")
			case ps.SecurityContext.SeccompProfile == nil || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
				t.Error("no RuntimeDefault seccomp profile")
			case c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem:
				t.Error("root filesystem not read-only")
			case c.Resources.Requests.Cpu().String() != "500m" || c.Resources.Requests.Memory().String() != "512Mi" || c.Resources.Limits.Memory().IsZero():
				t.Errorf("resources %v", c.Resources)
			}
		}
	}
	if deployments != 1 {
		t.Fatalf("%d Deployments", deployments)
	}
}

// TestInstallLimitsNamespaces: a new installation lists the namespaces
// its repository may write into, with or without --repo; it never
// defaults to any.
func TestInstallLimitsNamespaces(t *testing.T) {
	for _, opts := range []Options{{}, {Repo: "https://git.example/ml/config.git"}} {
		out, err := Manifests(opts)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := render.Parse(out)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, o := range objs {
			if o.GetKind() == "ConfigMap" && o.GetName() == "trainops-config" {
				cfg, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
				var m map[string]any
				if err := yaml.Unmarshal([]byte(cfg), &m); err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(m["allowedNamespaces"]) != fmt.Sprint(QuickStartNamespaces) {
					t.Errorf("repo %q: allowedNamespaces %v, want %v", opts.Repo, m["allowedNamespaces"], QuickStartNamespaces)
				}
				found = true
			}
		}
		if !found {
			t.Fatal("no trainops-config")
		}
	}
}

// TestInstallRunsTheImageOfItsBuild: the Deployment runs the image named
// (by default the one `make image` writes for this build), and a name
// without a tag is refused.
func TestInstallRunsTheImageOfItsBuild(t *testing.T) {
	out, err := Manifests(Options{Image: ImageOf("v1.2.3")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "image: ghcr.io/trainops/trainops:v1.2.3\n") {
		t.Errorf("the Deployment does not run ghcr.io/trainops/trainops:v1.2.3:\n%s", out)
	}
	if ImageOf("dev") != DefaultImage {
		t.Errorf("a dev build names %s, want %s", ImageOf("dev"), DefaultImage)
	}
	out, err = Manifests(Options{Image: "registry.example.com:5000/ml/trainops:rc1"})
	if err != nil || !strings.Contains(string(out), "image: registry.example.com:5000/ml/trainops:rc1\n") {
		t.Errorf("an image on a registry with a port: %v", err)
	}
	if _, err := Manifests(Options{Image: "registry.example.com/ml/trainops"}); err == nil {
		t.Error("an image without a tag was accepted")
	}
}
