// SPDX-License-Identifier: Apache-2.0

// Package benchrepo makes the training-config repositories the benchmarks
// and the render tests use: n objects (mostly PyJobs, some SREAgents, one
// ClusterPolicy, their Namespaces), written in each of the layouts users
// keep.
package benchrepo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Object is one generated object and its file, relative to the
// repository's root in the Plain layout.
type Object struct {
	Kind string
	File string
	U    *unstructured.Unstructured
}

// Generate makes n objects in namespaces named <prefix>-<i>: one namespace
// per 200 objects, one SREAgent per 50, one ClusterPolicy, the rest
// PyJobs.
func Generate(n int, prefix string) []Object {
	nss := max(1, n/200)
	agents := max(1, n/50)
	var out []Object
	for i := 0; i < nss; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		out = append(out, NamespaceObject(name))
	}
	out = append(out, Object{"ClusterPolicy", "gpu/policy.yaml", parse(fmt.Sprintf(`apiVersion: gpu.trainops.dev/v1alpha1
kind: ClusterPolicy
metadata:
  name: %s-gpu
spec:
  devicePlugin:
    config:
      sharing:
        timeSlicing:
          resources:
          - name: nvidia.com/gpu
            replicas: 4
`, prefix))})
	for i := 0; i < agents; i++ {
		ns := fmt.Sprintf("%s-%d", prefix, i%nss)
		out = append(out, Object{"SREAgent", fmt.Sprintf("agents/agent-%04d.yaml", i), parse(fmt.Sprintf("apiVersion: aiops.trainops.dev/v1alpha1\nkind: SREAgent\nmetadata:\n  name: agent-%04d\n  namespace: %s\nspec:\n  autoRepair: true\n  gpuEnable: true\n", i, ns))})
	}
	for i := 0; len(out) < n; i++ {
		ns := fmt.Sprintf("%s-%d", prefix, i%nss)
		name := fmt.Sprintf("job-%05d", i/nss)
		out = append(out, Object{"PyJob", fmt.Sprintf("jobs/%s-%s.yaml", ns, name), parse(PyJobYAML(ns, name))})
	}
	return out
}

// PyJobYAML is a training job; suspend: false is stated so a hand-made
// suspend is drift.
func PyJobYAML(ns, name string) string {
	return fmt.Sprintf(`apiVersion: training.trainops.dev/v1alpha1
kind: PyJob
metadata:
  name: %s
  namespace: %s
spec:
  image: pytorch/pytorch:2.0-cuda11.7-cudnn8-devel
  command: ["torchrun", "train.py", "--epochs=3"]
  gpu: 2
  workers: 2
  resources:
    cpu: "8"
    memory: 32Gi
  suspend: false
`, name, ns)
}

func parse(y string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	j, err := yaml.YAMLToJSON([]byte(y))
	if err == nil {
		err = u.UnmarshalJSON(j)
	}
	if err != nil {
		panic(err)
	}
	return u
}

// Layout is how a repository keeps its files.
type Layout string

// The layouts users keep.
const (
	// Plain is a folder of YAML files without a kustomization.
	Plain Layout = "plain"
	// Kustomization is the same files listed in one kustomization.yaml.
	Kustomization Layout = "kustomization"
	// Overlays is a folder per team (its namespace) with its own
	// kustomization, a base listing the teams and the GPU stack, and two
	// overlays, clusters/dev and clusters/prod, that add common labels, an
	// annotation and patches, as examples/ does.
	Overlays Layout = "overlays"
)

// Layouts are every layout, in the order reports list them.
var Layouts = []Layout{Plain, Kustomization, Overlays}

// ParseLayouts reads a comma-separated list of layouts.
func ParseLayouts(s string) ([]Layout, error) {
	var out []Layout
	for _, f := range strings.Split(s, ",") {
		l := Layout(strings.TrimSpace(f))
		switch l {
		case Plain, Kustomization, Overlays:
			out = append(out, l)
		default:
			return nil, fmt.Errorf("layout %q: want %s, %s or %s", l, Plain, Kustomization, Overlays)
		}
	}
	return out, nil
}

// Path is the folder of the repository a sync of l renders.
func (l Layout) Path() string {
	if l == Overlays {
		return "clusters/prod"
	}
	return "."
}

// FileOf is where l keeps o.
func (l Layout) FileOf(o Object) string {
	if l != Overlays {
		return o.File
	}
	switch ns := o.U.GetNamespace(); {
	case o.Kind == "Namespace":
		return "teams/" + o.U.GetName() + "/namespace.yaml"
	case ns != "":
		return "teams/" + ns + "/" + o.File
	default:
		return "base/" + o.File
	}
}

// Write writes objs under dir in layout l, with every kustomization the
// layout needs.
func Write(dir string, objs []Object, l Layout) error {
	lists := map[string][]string{} // kustomization folder → its resources
	for _, o := range objs {
		file, err := l.write(dir, o)
		if err != nil {
			return err
		}
		if k, entry := l.kustomizationOf(file); k != "" {
			lists[k] = append(lists[k], entry)
		}
	}
	if l == Overlays {
		var teams []string
		for k := range lists {
			if strings.HasPrefix(k, "teams/") {
				teams = append(teams, "../"+k)
			}
		}
		sort.Strings(teams)
		lists["base"] = append(lists["base"], teams...)
		for _, c := range []string{"dev", "prod"} {
			if err := writeFile(filepath.Join(dir, "clusters", c, "kustomization.yaml"), []byte(overlay(c))); err != nil {
				return err
			}
		}
	}
	for k, files := range lists {
		if err := WriteKustomization(dir, k, files, teamNamespace(k)); err != nil {
			return err
		}
	}
	return nil
}

// kustomizationOf is the folder of the kustomization that lists file in
// layout l, and the entry it lists; "" in the Plain layout.
func (l Layout) kustomizationOf(file string) (k, entry string) {
	switch l {
	case Kustomization:
		return ".", file
	case Overlays:
		k = "base"
		if strings.HasPrefix(file, "teams/") {
			k = strings.Join(strings.Split(file, "/")[:2], "/")
		}
		return k, strings.TrimPrefix(file, k+"/")
	}
	return "", ""
}

// write writes o's file where l keeps it, and returns the file.
func (l Layout) write(dir string, o Object) (string, error) {
	b, err := yaml.Marshal(o.U.Object)
	if err != nil {
		return "", err
	}
	file := l.FileOf(o)
	return file, writeFile(filepath.Join(dir, file), b)
}

// Add writes one more object as l keeps it, and lists it in its
// kustomization, whose resources come last (as Write writes them).
func Add(dir string, o Object, l Layout) error {
	file, err := l.write(dir, o)
	if err != nil {
		return err
	}
	k, entry := l.kustomizationOf(file)
	if k == "" {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(dir, k, "kustomization.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "- %s\n", entry)
	return errors.Join(err, f.Close())
}

// NewPyJob is one more PyJob, for a push.
func NewPyJob(ns, name string) Object {
	return Object{"PyJob", "jobs/" + ns + "-" + name + ".yaml", parse(PyJobYAML(ns, name))}
}

// NamespaceObject is Namespace name, in namespaces/.
func NamespaceObject(name string) Object {
	return Object{"Namespace", "namespaces/" + name + ".yaml", parse("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + name + "\n")}
}

// SeedObject is the one Namespace a benchmark's repository starts with;
// written with the objects, in the same layout, it stays.
func SeedObject() Object {
	return Object{"Namespace", "seed.yaml", parse("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: bench-seed\n")}
}

// teamNamespace is the namespace a team folder's kustomization sets.
func teamNamespace(k string) string {
	if t, ok := strings.CutPrefix(k, "teams/"); ok {
		return t
	}
	return ""
}

// WriteKustomization writes the kustomization of folder k (relative to
// dir) listing resources, setting namespace when it is not empty.
func WriteKustomization(dir, k string, resources []string, namespace string) error {
	var b strings.Builder
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n")
	if namespace != "" {
		fmt.Fprintf(&b, "namespace: %s\n", namespace)
	}
	b.WriteString("resources:\n")
	for _, r := range resources {
		fmt.Fprintf(&b, "- %s\n", r)
	}
	return writeFile(filepath.Join(dir, k, "kustomization.yaml"), []byte(b.String()))
}

// overlay is cluster c's kustomization: the base, with labels and an
// annotation on everything, the time-slicing replicas patched and every
// SREAgent's interval set.
func overlay(c string) string {
	return fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../base
labels:
- pairs:
    cluster: %[1]s
commonAnnotations:
  trainops.dev/cluster: %[1]s
patches:
- target:
    kind: ClusterPolicy
  patch: |
    - op: replace
      path: /spec/devicePlugin/config/sharing/timeSlicing/resources/0/replicas
      value: 2
- target:
    kind: SREAgent
  patch: |
    apiVersion: aiops.trainops.dev/v1alpha1
    kind: SREAgent
    metadata:
      name: any
    spec:
      monitorInterval: 30
`, c)
}

func writeFile(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}
