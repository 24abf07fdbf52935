// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/trainops/trainops/render"
)

// TestKrustyNamesEachObjectsFile: outside the fast path each object is
// named by the file it came from (a List's items by the List's file, a
// base's by the base's), generated objects by the top kustomization, and
// the build is `kustomize build`'s object for object, with nothing of
// trainops's own annotation left on any object, nor where a replacement
// copied a whole annotations map (one the repository sets
// of the same name is its own, kept), and a document whose metadata is an
// anchor another place shares left as it is.
func TestKrustyNamesEachObjectsFile(t *testing.T) {
	root := tree(t, map[string]string{
		"kustomization.yaml": "resources:\n- base\n- job.yaml\nnamePrefix: p-\nconfigMapGenerator:\n- name: settings\n  literals: [a=b]\n" +
			"patches:\n- target: {kind: ConfigMap}\n  patch: |\n    - op: add\n      path: /data/patched\n      value: \"yes\"\n" +
			// A whole annotations map copied into the pod template.
			"replacements:\n- source: {kind: Job, fieldPath: metadata.annotations}\n  targets:\n  - select: {kind: Job}\n    fieldPaths: [spec.template.metadata.annotations]\n    options: {create: true}\n",
		"base/kustomization.yaml": "resources:\n- list.yaml\n- shared.yaml\n",
		"base/list.yaml": "apiVersion: v1\nkind: ConfigMapList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: one}\n  data: {k: v}\n" +
			"- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: two\n    annotations: {x: \"1\"}\n  data: {k: v}\n",
		"base/shared.yaml": "apiVersion: v1\nkind: Service\nmetadata: &m\n  name: web\n  labels: {app: web}\nspec:\n  selector: {app: web}\n  ports: [{port: 80}]\n" +
			"---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: three\n  annotations: ~\ndata: {k: v}\n",
		"job.yaml": "# a comment\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: train\n  annotations:\n    internal.trainops.dev/source-file: elsewhere.yaml\n" +
			"spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: c, image: busybox}]\n",
	})
	objs, err := render.RenderContext(t.Context(), root, ".", render.Limits{NoFastPath: true})
	if err != nil {
		t.Fatal(err)
	}
	sameAsKustomizeBuild(t, "sources", root, ".", objs)
	want := map[string]string{
		"ConfigMap p-one": "base/list.yaml", "ConfigMap p-two": "base/list.yaml", "Job p-train": "job.yaml",
		// Left as they are: an anchored metadata, annotations that are null.
		"Service p-web": "kustomization.yaml", "ConfigMap p-three": "kustomization.yaml",
	}
	for _, o := range objs {
		id := o.GetKind() + " " + o.GetName()
		if strings.HasPrefix(id, "ConfigMap p-settings-") {
			id = "ConfigMap p-settings"
			want[id] = "kustomization.yaml"
		}
		if o.File != want[id] {
			t.Errorf("%s named by %q, want %q", id, o.File, want[id])
		}
		for k := range o.GetAnnotations() {
			if strings.HasPrefix(k, "internal.trainops.dev/source-file.") {
				t.Errorf("%s keeps %s", id, k)
			}
		}
	}
	// The Job's own annotation of that name is the repository's: kept,
	// and not taken for the file.
	job := objs[4]
	if job.GetAnnotations()["internal.trainops.dev/source-file"] != "elsewhere.yaml" {
		t.Errorf("the Job's own annotations: %v", job.GetAnnotations())
	}
	// As kustomize copies it (its own build annotations too), without
	// trainops's key.
	tmpl, _, _ := unstructured.NestedStringMap(job.Object, "spec", "template", "metadata", "annotations")
	for k := range tmpl {
		if strings.HasPrefix(k, "internal.trainops.dev/source-file.") {
			t.Errorf("the Job's template keeps %s", k)
		}
	}
	if tmpl["internal.trainops.dev/source-file"] != "elsewhere.yaml" {
		t.Errorf("the annotations copied into the Job's template: %v", tmpl)
	}
	if len(objs) != 6 {
		t.Errorf("%d objects", len(objs))
	}
}
