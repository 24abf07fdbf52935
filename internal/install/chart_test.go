// SPDX-License-Identifier: Apache-2.0

package install

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/render"
)

// helmTemplate renders charts/trainops with the Helm pinned in
// hack/tools/helm, CRDs included.
func helmTemplate(t *testing.T, namespace string, set ...string) []byte {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-C", filepath.Join(root, "hack", "tools", "helm"), "tool", "helm", "template", "trainops", filepath.Join(root, "charts", "trainops"), "--include-crds", "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template: %v\n%s", err, errOut.String())
	}
	return out.Bytes()
}

// byID indexes rendered objects by kind, namespace and name, with what is
// the chart's own by design taken out: the Namespace (helm install
// --create-namespace makes it) and the pod template's configuration hash
// (it rolls the pods on helm upgrade). The configuration file is compared
// as the settings it holds, not as text.
func byID(t *testing.T, raw []byte) map[string]map[string]any {
	t.Helper()
	objs, err := render.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		unstructured.RemoveNestedField(o.Object, "spec", "template", "metadata", "annotations", "trainops.dev/config-hash")
		if anns, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "metadata", "annotations"); o.GetKind() == "Deployment" && len(anns) == 0 {
			unstructured.RemoveNestedField(o.Object, "spec", "template", "metadata", "annotations")
		}
		if s, ok, _ := unstructured.NestedString(o.Object, "data", "config.yaml"); ok {
			var settings map[string]any
			if err := yaml.Unmarshal([]byte(s), &settings); err != nil {
				t.Fatal(err)
			}
			_ = unstructured.SetNestedField(o.Object, settings, "data", "config.yaml")
		}
		out[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = o.Object
	}
	return out
}

// TestChartRendersTheInstallation holds charts/trainops, rendered by real
// Helm, against `trainops install` for the same settings: the same CRDs,
// RBAC, configuration, Deployment and Service, object for object.
func TestChartRendersTheInstallation(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		set  []string
	}{
		{"defaults", Options{}, nil},
		{"a repository in another namespace", Options{Namespace: "team-ops", Repo: "https://git.example/ml/training-config.git", Branch: "main", Path: "clusters/prod"},
			[]string{"repo.url=https://git.example/ml/training-config.git", "repo.branch=main", "repo.path=clusters/prod"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := Manifests(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			ns := tc.opts.Namespace
			if ns == "" {
				ns = "trainops-system"
			}
			w, g := byID(t, want), byID(t, helmTemplate(t, ns, tc.set...))
			if diff := cmp.Diff(w, g); diff != "" {
				t.Fatalf("trainops install (-) and the chart (+) differ:\n%s", diff)
			}
		})
	}
}
