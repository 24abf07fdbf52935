package main

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// object is one generated object and its file.
type object struct {
	kind string
	file string
	u    *unstructured.Unstructured
}

// generate makes a repository of n objects in namespaces named
// <prefix>-<i>: one namespace per 200 objects, one SREAgent per 50, one
// ClusterPolicy, the rest PyJobs.
func generate(n int, prefix string) []object {
	nss := max(1, n/200)
	agents := max(1, n/50)
	var out []object
	for i := 0; i < nss; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		out = append(out, object{"Namespace", "namespaces/" + name + ".yaml", parse(fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", name))})
	}
	out = append(out, object{"ClusterPolicy", "gpu/policy.yaml", parse(fmt.Sprintf(`apiVersion: gpu.trainops.dev/v1alpha1
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
		out = append(out, object{"SREAgent", fmt.Sprintf("agents/agent-%04d.yaml", i), parse(fmt.Sprintf("apiVersion: aiops.trainops.dev/v1alpha1\nkind: SREAgent\nmetadata:\n  name: agent-%04d\n  namespace: %s\nspec:\n  autoRepair: true\n  gpuEnable: true\n", i, ns))})
	}
	for i := 0; len(out) < n; i++ {
		ns := fmt.Sprintf("%s-%d", prefix, i%nss)
		name := fmt.Sprintf("job-%05d", i/nss)
		out = append(out, object{"PyJob", fmt.Sprintf("jobs/%s-%s.yaml", ns, name), parse(pyjobYAML(ns, name))})
	}
	return out
}

// pyjobYAML is a training job; suspend: false is stated so a hand-made
// suspend is drift.
func pyjobYAML(ns, name string) string {
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

// writeObjects writes each object to its file under dir.
func writeObjects(dir string, objs []object) error {
	for _, o := range objs {
		b, err := yaml.Marshal(o.u.Object)
		if err != nil {
			return err
		}
		p := filepath.Join(dir, o.file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
