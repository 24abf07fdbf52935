// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/internal/trap"
	"github.com/trainops/trainops/render"
)

// myCRD and its patch are kustomize's own custom-schema case
// (api/krusty/openapicustomschema_test.go): with the schema its
// kustomization names, the patch's containers merge by name; without, the
// patch's list replaces the resource's.
const myCRD = `apiVersion: example.com/v1alpha1
kind: MyCRD
metadata:
  name: service
spec:
  template:
    spec:
      containers:
      - name: server
        image: server
        command: example
        ports:
        - name: grpc
          protocol: TCP
          containerPort: 8080
`

const myCRDPatch = `patchesStrategicMerge:
- |-
  apiVersion: example.com/v1alpha1
  kind: MyCRD
  metadata:
    name: service
  spec:
    template:
      spec:
        containers:
        - name: server
          image: nginx
`

// schemaTrees writes two repositories of the custom-schema case, one
// whose kustomization names kustomize's own test schema, one without.
func schemaTrees(t *testing.T) (withSchema, without string) {
	schema, err := os.ReadFile(filepath.Join(kustomizeModuleDir(t), "krusty", "testdata", "customschema.json"))
	if err != nil {
		t.Fatal(err)
	}
	withSchema = realTree(t, map[string]string{
		"kustomization.yaml": "openapi:\n  path: mycrd_schema.json\nresources:\n- mycrd.yaml\n" + myCRDPatch,
		"mycrd_schema.json":  string(schema),
		"mycrd.yaml":         myCRD,
	})
	without = realTree(t, map[string]string{
		"kustomization.yaml": "resources:\n- mycrd.yaml\n" + myCRDPatch,
		"mycrd.yaml":         myCRD,
	})
	return withSchema, without
}

// containerOf is the first container of the one MyCRD objs holds.
func containerOf(t *testing.T, objs []render.Object) string {
	t.Helper()
	if len(objs) != 1 {
		t.Fatalf("%d objects", len(objs))
	}
	list, _, _ := unstructured.NestedSlice(objs[0].Object, "spec", "template", "spec", "containers")
	if len(list) != 1 {
		t.Fatalf("containers %v", list)
	}
	b, err := yaml.Marshal(list[0])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWarmChildKeepsNothingOfTheLastBuild: builds outside the fast path
// share one child, one after the other, and a build that set kustomize's
// global OpenAPI schema leaves nothing of it for the next: that build is
// as a child started for it alone makes it.
func TestWarmChildKeepsNothingOfTheLastBuild(t *testing.T) {
	withSchema, without := schemaTrees(t)
	fresh := render.Limits{FreshChild: true}
	wantWithout, err := render.RenderContext(t.Context(), without, ".", fresh)
	if err != nil {
		t.Fatal(err)
	}
	wantWith, err := render.RenderContext(t.Context(), withSchema, ".", fresh)
	if err != nil {
		t.Fatal(err)
	}
	if containerOf(t, wantWith) == containerOf(t, wantWithout) {
		t.Fatalf("the schema changed nothing: %s", containerOf(t, wantWith))
	}
	for i := range 2 {
		got, err := render.RenderContext(t.Context(), withSchema, ".", render.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if c := containerOf(t, got); c != containerOf(t, wantWith) {
			t.Errorf("build %d with the schema, in a warm child: %s, want %s", i, c, containerOf(t, wantWith))
		}
		before := render.IdleChildren()
		got, err = render.RenderContext(t.Context(), without, ".", render.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if c := containerOf(t, got); c != containerOf(t, wantWithout) {
			t.Errorf("build %d without the schema, after one with it in the same child: %s, want %s", i, c, containerOf(t, wantWithout))
		}
		if after := render.IdleChildren(); len(before) == 0 || !slices.Equal(before, after) {
			t.Errorf("children waiting before the build %v, after %v: the build did not reuse the warm child", before, after)
		}
	}
}

// TestFailedChildIsNotReused: a child stopped at the deadline is ended,
// never handed the next build; the next build gets a child that works.
func TestFailedChildIsNotReused(t *testing.T) {
	_, without := schemaTrees(t)
	if _, err := render.RenderContext(t.Context(), without, ".", render.Limits{}); err != nil {
		t.Fatal(err)
	}
	warm := render.IdleChildren()
	if len(warm) == 0 {
		t.Fatal("no child kept warm")
	}
	bomb := realTree(t, map[string]string{"kustomization.yaml": "resources:\n- bomb.yaml\n", "bomb.yaml": trap.AliasBomb})
	if _, err := isolated(t, bomb, render.Limits{Timeout: 2 * time.Second}); err == nil {
		t.Fatal("the alias bomb built")
	}
	after := render.IdleChildren()
	var stopped []int
	for _, pid := range warm {
		if !slices.Contains(after, pid) {
			stopped = append(stopped, pid)
		}
	}
	if len(stopped) != 1 || len(after) != len(warm)-1 {
		t.Fatalf("children waiting before the stopped build %v, after %v: the stopped build's child is still waiting", warm, after)
	}
	// Ended and waited for: no process of that ID is left.
	if err := syscall.Kill(stopped[0], 0); err == nil {
		t.Errorf("child %d, stopped at the deadline, still runs", stopped[0])
	}
	if _, err := render.RenderContext(t.Context(), without, ".", render.Limits{}); err != nil {
		t.Fatalf("the build after a stopped one: %v", err)
	}
}

// TestKrustyBuildsUnderAnyFolderName: a checkout in a folder kustomize's
// in-memory file system would refuse to name (a CI workspace
// "job@2", a space) builds outside the fast path as inside it.
func TestKrustyBuildsUnderAnyFolderName(t *testing.T) {
	for _, name := range []string{"job@2", "my repo", "team+ml~1"} {
		t.Run(name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), name)
			files := map[string]string{
				"kustomization.yaml":     "resources:\n- app\n",
				"app/kustomization.yaml": "configMapGenerator:\n- name: settings\n  literals:\n  - a=b\nresources:\n- cm.yaml\n",
				"app/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n",
			}
			for p, c := range files {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			objs, err := render.RenderContext(t.Context(), root, ".", render.Limits{NoFastPath: true})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, o := range objs {
				names = append(names, o.GetName())
			}
			slices.Sort(names)
			if len(names) != 2 || names[0] != "plain" || !strings.HasPrefix(names[1], "settings-") {
				t.Errorf("objects %v", names)
			}
		})
	}
}
