// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/internal/apicase"
)

// Seed is the path of a seed example of testdata/seeds.
func Seed(name string) string {
	root, err := RepoRoot()
	if err != nil {
		panic(err)
	}
	return filepath.Join(root, "testdata", "seeds", name+".yaml")
}

// LoadCase reads a file of testdata into a typed object.
func LoadCase(t testing.TB, path string, into client.Object) {
	t.Helper()
	cases, err := apicase.Load(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if c.Path == path {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(c.Objects[0].Object, into); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no case %s", path)
}

// InstallYAML creates the object of a YAML file.
func InstallYAML(t testing.TB, c client.Client, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &u.Object); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
}

// PatchAs changes obj as another field manager would, with kubectl.
func PatchAs(t testing.TB, c client.Client, obj client.Object, manager string, typ types.PatchType, patch string) {
	t.Helper()
	if err := c.Patch(context.Background(), obj, client.RawPatch(typ, []byte(patch)), client.FieldOwner(manager)); err != nil {
		t.Fatalf("%s: %v", manager, err)
	}
}

// EventReasons maps the reasons of the Events recorded about the object
// ns/name to their notes (the last of each).
func EventReasons(t testing.TB, c client.Client, ns, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range events(t, c, ns, name) {
		out[e.Reason] = e.Note
	}
	return out
}

// EventNotes are the notes of the Events about the object ns/name with
// reason.
func EventNotes(t testing.TB, c client.Client, ns, name, reason string) []string {
	t.Helper()
	var out []string
	for _, e := range events(t, c, ns, name) {
		if e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

func events(t testing.TB, c client.Client, ns, name string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// Node reads a node.
func Node(t testing.TB, c client.Client, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n
}

// GPUNodeNames are the simulated GPU nodes, by name.
func (e *Env) GPUNodeNames() []string {
	var gpu []string
	for _, n := range e.Nodes {
		if strings.HasPrefix(n, "gpu-") {
			gpu = append(gpu, n)
		}
	}
	slices.Sort(gpu)
	return gpu
}
