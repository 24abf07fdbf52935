// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainops/trainops/render"
)

// tree writes files (path -> content) under a new root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n"

func cmYAML(name string) string { return strings.Replace(cm, "%s", name, 1) }

func ids(objs []render.Object) string {
	var s []string
	for _, o := range objs {
		s = append(s, o.ID()+"@"+o.File)
	}
	return strings.Join(s, ",")
}

func TestRenderExamplesWithKustomize(t *testing.T) {
	objs, err := render.Render(filepath.Join("..", "examples"), "clusters/prod")
	if err != nil {
		t.Fatal(err)
	}
	got := ids(objs)
	for _, want := range []string{"PyJob ml-team/bert-training@base/jobs/bert-training.yaml", "ClusterPolicy gpu-cluster-config@base/gpu/gpu-cluster-config.yaml", "Namespace ml-team@base/namespace.yaml", "SREAgent ml-team/gpu-monitor-agent@base/agents/gpu-monitor-agent.yaml"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in %s", want, got)
		}
	}
	for _, o := range objs {
		if _, ok := o.GetAnnotations()["config.kubernetes.io/origin"]; ok {
			t.Errorf("%s keeps kustomize's origin annotation", o.ID())
		}
	}
}

func TestRenderOverlayNamesBaseFiles(t *testing.T) {
	root := tree(t, map[string]string{
		"base/kustomization.yaml":         "resources:\n- jobs.yaml\n",
		"base/jobs.yaml":                  cmYAML("a") + "---\n" + cmYAML("b"),
		"clusters/dev/kustomization.yaml": "resources:\n- ../../base\nnamespace: dev\nnamePrefix: dev-\n",
	})
	objs, err := render.Render(root, "clusters/dev")
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(objs); got != "ConfigMap dev/dev-a@base/jobs.yaml,ConfigMap dev/dev-b@base/jobs.yaml" {
		t.Fatalf("got %s", got)
	}
}

func TestRenderPlainFolder(t *testing.T) {
	root := tree(t, map[string]string{
		"jobs/b.yaml":         cmYAML("b"),
		"jobs/a.yml":          "# only a comment\n---\n" + cmYAML("a"),
		"jobs/.hidden/x.yaml": cmYAML("hidden"),
		"jobs/notes.txt":      "not yaml",
	})
	objs, err := render.Render(root, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(objs); got != "ConfigMap a@jobs/a.yml,ConfigMap b@jobs/b.yaml" {
		t.Fatalf("got %s", got)
	}
}

func TestRenderRefusals(t *testing.T) {
	outside := tree(t, map[string]string{"secret.yaml": cmYAML("stolen")})
	tests := []struct {
		name  string
		files map[string]string
		setup func(root string)
		path  string
		want  []string
	}{
		{"path with ..", map[string]string{"a.yaml": cmYAML("a")}, nil, "../../etc", []string{"leaves the repository"}},
		{"kustomization reaching outside", map[string]string{"kustomization.yaml": "resources:\n- ../../../../" + strings.TrimPrefix(outside, "/") + "/secret.yaml\n"}, nil, ".", []string{"kustomization.yaml"}},
		{"symlinked file out of the repo", map[string]string{"a.yaml": cmYAML("a")}, func(root string) {
			_ = os.Symlink(filepath.Join(outside, "secret.yaml"), filepath.Join(root, "link.yaml"))
		}, ".", []string{"link.yaml", "symlink that leaves the repository"}},
		{"symlinked folder out of the repo", nil, func(root string) {
			_ = os.Symlink(outside, filepath.Join(root, "jobs"))
		}, "jobs", []string{"jobs", "symlink that leaves the repository"}},
		{"remote base", map[string]string{"kustomization.yaml": "resources:\n- https://github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v3.3.1\n"}, nil, ".", []string{"kustomization.yaml"}},
		{"malformed YAML", map[string]string{"bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n"}, nil, ".", []string{"bad.yaml", "document 1"}},
		{"no kind", map[string]string{"nokind.yaml": "apiVersion: v1\nmetadata:\n  name: x\n"}, nil, ".", []string{"nokind.yaml", "no kind"}},
		{"missing folder", map[string]string{"a.yaml": cmYAML("a")}, nil, "nope", []string{"nope", "no such folder"}},
		{"file too large", map[string]string{"big.yaml": cmYAML("big") + "data:\n  x: \"" + strings.Repeat("x", render.MaxFileBytes) + "\"\n"}, nil, ".", []string{"big.yaml", "larger than"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t, tc.files)
			if tc.setup != nil {
				tc.setup(root)
			}
			objs, err := render.Render(root, tc.path)
			if err == nil {
				t.Fatalf("rendered %s", ids(objs))
			}
			var re *render.Error
			if !errors.As(err, &re) {
				t.Fatalf("error %T is not a render.Error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "stolen") {
				t.Errorf("content from outside the repository leaked: %v", err)
			}
		})
	}
}

func TestRenderedObjectsDeepCopy(t *testing.T) {
	// Numbers must come out as int64: unstructured's DeepCopy panics on int.
	root := tree(t, map[string]string{
		"kustomization.yaml": "resources:\n- job.yaml\n",
		"job.yaml":           "apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: j\n  namespace: n\nspec:\n  gpu: 2\n  workers: 3\n",
	})
	objs, err := render.Render(root, ".")
	if err != nil {
		t.Fatal(err)
	}
	c := objs[0].DeepCopy()
	if v, _, _ := unstructured.NestedInt64(c.Object, "spec", "gpu"); v != 2 {
		t.Fatalf("gpu %v", v)
	}
	plain := tree(t, map[string]string{"job.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: \"1\"\n"})
	objs, err = render.Render(plain, ".")
	if err != nil {
		t.Fatal(err)
	}
	_ = objs[0].DeepCopy()
}

// TestRenderAFileAndAPlainFolderOverAKustomization: a path naming a file
// renders that file alone; a plain folder with a kustomization below it is
// refused with what to do, rather than its kustomization.yaml read as an
// object.
func TestRenderAFileAndAPlainFolderOverAKustomization(t *testing.T) {
	root := tree(t, map[string]string{
		"a.yaml":                  fmt.Sprintf(cm, "a"),
		"b.yaml":                  fmt.Sprintf(cm, "b"),
		"team/kustomization.yaml": "resources:\n- c.yaml\n",
		"team/c.yaml":             fmt.Sprintf(cm, "c"),
	})
	objs, err := render.Render(root, "a.yaml")
	if err != nil || len(objs) != 1 || objs[0].GetName() != "a" || objs[0].File != "a.yaml" {
		t.Fatalf("one file: %v %v", objs, err)
	}
	_, err = render.Render(root, ".")
	var re *render.Error
	if !errors.As(err, &re) || re.File != "team/kustomization.yaml" || !strings.Contains(err.Error(), "render it as its own root (path team)") {
		t.Fatalf("plain folder over a kustomization: %v", err)
	}
}
