package install

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"strings"
	"testing"

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
	foundConfig := false
	for _, o := range objs {
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
	if !foundConfig {
		t.Fatal("no trainops-config ConfigMap")
	}
}
