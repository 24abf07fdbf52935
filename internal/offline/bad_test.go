// SPDX-License-Identifier: Apache-2.0

package offline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/trap"
	"github.com/trainops/trainops/internal/workload"
)

// load runs Load with a bound on time, as a sync would meet the input.
func load(t *testing.T, l *Loader, dir string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := l.Load(dir, "."); done <- err }()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: not done within 60s", dir)
		return nil
	}
}

func TestBadInputCorpus(t *testing.T) {
	// No case may reach a listener or run a program (git for the remote
	// base): checked after each.
	tr := trap.New(t)
	l, err := NewLoader(Options{})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..", "..", "testdata", "bad")
	for _, tc := range []struct{ dir, file, object, message string }{
		{"malformed", "cm.yaml", "", "document 1"},
		{"unknown-kind", "job.yaml", "PyJobs ml/typo", "not allowed"},
		{"schema-violation", "job.yaml", "PyJob ml/wrong-type", `spec.command: Invalid value: "string": spec.command in body must be of type array`},
		{"cel-violation", "policy.yaml", "ClusterPolicy both", "MIG and time-slicing cannot both be on"},
		{"reaches-outside", "kustomization.yaml", "", "field resources: entry \"../../../go.mod\" leaves the repository"},
		{"remote-base", "kustomization.yaml", "", "is remote content, which trainops never fetches"},
		{"alias-bomb", "bomb.yaml", "", "alias"},
		{"duplicate", "b.yaml", "PyJob ml/twice", "defined twice (also in a.yaml)"},
		{"disallowed-kind", "rbac.yaml", "ClusterRoleBinding take-over", "is not allowed in the repository"},
		{"symlink-out", "passwd.yaml", "", "symlink that leaves the repository"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			err := load(t, l, filepath.Join(root, tc.dir))
			var ie *InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("err %v (%T), want an InvalidError", err, err)
			}
			msg := err.Error()
			for _, w := range []string{tc.file, tc.object, tc.message} {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, "root:x:0:0") || strings.Contains(msg, "module github.com/trainops") {
				t.Error("content from outside the repository in the error")
			}
			tr.AssertUntouched(t)
		})
	}
}

func TestHugeInputsAreBounded(t *testing.T) {
	l, err := NewLoader(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a 20 MB file", func(t *testing.T) {
		dir := t.TempDir()
		big := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\n  namespace: ml\ndata:\n  x: \"" + strings.Repeat("x", 20<<20) + "\"\n"
		if err := os.WriteFile(filepath.Join(dir, "big.yaml"), []byte(big), 0o644); err != nil {
			t.Fatal(err)
		}
		err := load(t, l, dir)
		if err == nil || !strings.Contains(err.Error(), "big.yaml") || !strings.Contains(err.Error(), "larger than") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("tens of thousands of objects", func(t *testing.T) {
		dir := t.TempDir()
		// Four files of 5,000, each under the size limit.
		for f := 0; f < 4; f++ {
			var b strings.Builder
			for i := f * 5000; i < (f+1)*5000; i++ {
				fmt.Fprintf(&b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%05d\n  namespace: ml\ndata:\n  k: v\n", i)
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("cms-%d.yaml", f)), []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		objs, err := l.Load(dir, ".")
		if err != nil {
			t.Fatal(err)
		}
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		if len(objs) != 20000 {
			t.Fatalf("%d objects, want 20000", len(objs))
		}
		if grown := (after.HeapInuse - min(before.HeapInuse, after.HeapInuse)) >> 20; grown > 512 {
			t.Fatalf("loading 20,000 objects holds %d MiB", grown)
		}
	})
}

// TestClusterPolicyNamespaceIsChecked: a ClusterPolicy is cluster-scoped
// but runs privileged DaemonSets in spec.namespace, which is held to the
// allowed and protected namespaces like any object's.
func TestClusterPolicyNamespaceIsChecked(t *testing.T) {
	policy := func(ns string) string {
		y := "apiVersion: gpu.trainops.dev/v1alpha1\nkind: ClusterPolicy\nmetadata:\n  name: gpu\nspec:\n  driver:\n    repository: nvcr.io/nvidia\n"
		if ns != "" {
			y += "  namespace: " + ns + "\n"
		}
		return y
	}
	for _, tc := range []struct {
		ns, want string
		allowed  []string
	}{
		{"kube-system", "spec.namespace: namespace kube-system is protected", nil},
		{"kube-system", "spec.namespace: namespace kube-system is protected", []string{"ml-team", "kube-system"}},
		{"gpu-stack", "spec.namespace: namespace gpu-stack is not allowed in the repository (allowed: ml-team)", []string{"ml-team"}},
		{"", "spec.namespace: namespace gpu-operator is not allowed", []string{"ml-team"}},
	} {
		l, err := NewLoader(Options{AllowedNamespaces: tc.allowed})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(policy(tc.ns)), 0o644); err != nil {
			t.Fatal(err)
		}
		err = load(t, l, dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "policy.yaml") {
			t.Errorf("namespace %q allowed %v: error %v", tc.ns, tc.allowed, err)
		}
	}
	// Allowed: valid.
	l, _ := NewLoader(Options{AllowedNamespaces: []string{"ml-team", "gpu-operator"}})
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(policy("")), 0o644)
	if err := load(t, l, dir); err != nil {
		t.Fatalf("an allowed namespace: %v", err)
	}
}

// TestWorkloadPolicy: what a commit may not give the pods trainops builds,
// refused offline as by the sync, naming the field; and the same objects
// within the policy pass.
func TestWorkloadPolicy(t *testing.T) {
	pyjob := func(extra string) string {
		return "apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: j\n  namespace: ml\nspec:\n  image: pytorch/pytorch:2.0\n  command: [python, train.py]\n  gpu: 1\n" + extra
	}
	policy := func(extra string) string {
		return "apiVersion: gpu.trainops.dev/v1alpha1\nkind: ClusterPolicy\nmetadata:\n  name: gpu\nspec:\n" + extra
	}
	const (
		hostNetwork  = "  template:\n    spec:\n      hostNetwork: true\n"
		hostPath     = "  template:\n    spec:\n      volumes:\n      - name: root\n        hostPath:\n          path: /\n"
		privileged   = "  template:\n    spec:\n      containers:\n      - name: debug\n        image: busybox\n        securityContext:\n          privileged: true\n"
		capability   = "  template:\n    spec:\n      containers:\n      - name: trainer\n        securityContext:\n          capabilities:\n            add: [SYS_ADMIN]\n"
		secretVolume = "  template:\n    spec:\n      volumes:\n      - name: creds\n        secret:\n          secretName: creds\n"
	)
	for _, tc := range []struct {
		name, yaml string
		opts       Options
		want       string // "" when valid
	}{
		{"system priority class", pyjob("  priorityClassName: system-node-critical\n"), Options{}, "spec.priorityClassName: system-node-critical is the cluster's own class"},
		{"own priority class", pyjob("  priorityClassName: training-high\n"), Options{}, ""},
		{"class off the list", pyjob("  priorityClassName: training-high\n"), Options{Workload: workload.Policy{AllowedPriorityClasses: []string{"training-low"}}}, "spec.priorityClassName: training-high is not allowed (allowedPriorityClasses: training-low)"},
		{"tolerate every taint", pyjob("  tolerations:\n  - operator: Exists\n"), Options{}, "spec.tolerations[0]: tolerating every taint"},
		{"tolerate every taint, allowed", pyjob("  tolerations:\n  - operator: Exists\n"), Options{Workload: workload.Policy{AllowTolerateAll: true}}, ""},
		{"tolerate one taint", pyjob("  tolerations:\n  - key: nvidia.com/gpu\n    operator: Exists\n"), Options{}, ""},
		{"secret in env, refused", pyjob("  env:\n  - name: T\n    valueFrom:\n      secretKeyRef:\n        name: s\n        key: k\n"), Options{Workload: workload.Policy{RefuseSecretRefs: true}}, "spec.env[0].valueFrom.secretKeyRef"},
		{"secret in env, default", pyjob("  env:\n  - name: T\n    valueFrom:\n      secretKeyRef:\n        name: s\n        key: k\n"), Options{}, ""},
		{"template on the node's network", pyjob(hostNetwork), Options{}, "spec.template.spec.hostNetwork: sharing the node's namespaces"},
		{"template on the node's network, allowed", pyjob(hostNetwork), Options{Workload: workload.Policy{PodPowers: config.PodPowers{AllowHostNamespaces: true}}}, ""},
		{"template mounting the node's disk", pyjob(hostPath), Options{}, "spec.template.spec.volumes[name=root].hostPath: mounting the node's /"},
		{"template mounting the node's disk, allowed", pyjob(hostPath), Options{Workload: workload.Policy{PodPowers: config.PodPowers{AllowHostPath: true}}}, ""},
		{"privileged sidecar", pyjob(privileged), Options{}, "spec.template.spec.containers[name=debug].securityContext.privileged: a privileged container is root on the node"},
		{"privileged sidecar, allowed", pyjob(privileged), Options{Workload: workload.Policy{PodPowers: config.PodPowers{AllowPrivileged: true}}}, ""},
		{"added capability", pyjob(capability), Options{}, "spec.template.spec.containers[name=trainer].securityContext.capabilities.add: adding SYS_ADMIN is refused"},
		{"added capability, allowed", pyjob(capability), Options{Workload: workload.Policy{PodPowers: config.PodPowers{AllowAddedCapabilities: true}}}, ""},
		{"template's system priority class", pyjob("  template:\n    spec:\n      priorityClassName: system-cluster-critical\n"), Options{}, "spec.template.spec.priorityClassName: system-cluster-critical is the cluster's own class"},
		{"template tolerating every taint", pyjob("  template:\n    spec:\n      tolerations:\n      - operator: Exists\n"), Options{}, "spec.template.spec.tolerations[0]: tolerating every taint"},
		{"template's Secret volume, refused", pyjob(secretVolume), Options{Workload: workload.Policy{RefuseSecretRefs: true}}, "spec.template.spec.volumes[name=creds]: reading a Secret is refused here"},
		{"template's Secret volume, default", pyjob(secretVolume), Options{}, ""},
		{"template's envFrom Secret, refused", pyjob("  template:\n    spec:\n      containers:\n      - name: trainer\n        envFrom:\n        - secretRef:\n            name: creds\n"), Options{Workload: workload.Policy{RefuseSecretRefs: true}}, "spec.template.spec.containers[name=trainer].envFrom[0].secretRef"},
		{"template with a typo", pyjob("  template:\n    spec:\n      serviceAcountName: trainer\n"), Options{}, `spec.template: unknown field "spec.serviceAcountName"`},
		{"template's sidecar without an image", pyjob("  template:\n    spec:\n      containers:\n      - name: proxy\n"), Options{}, "spec.template.spec.containers[name=proxy].image: required"},
		{"driver from elsewhere", policy("  driver:\n    repository: evil.example.com/nvidia\n"), Options{}, "spec.driver.repository: evil.example.com/nvidia is not from an allowed registry"},
		{"look-alike registry", policy("  devicePlugin:\n    image: nvcr.io/nvidia-evil/k8s-device-plugin:v0.17.0\n"), Options{}, "spec.devicePlugin.image: nvcr.io/nvidia-evil/k8s-device-plugin:v0.17.0 is not from an allowed registry"},
		{"NVIDIA's images", policy("  devicePlugin:\n    image: nvcr.io/nvidia/k8s-device-plugin:v0.17.0\n"), Options{}, ""},
		{"a mirror on the list", policy("  dcgm:\n    exporter:\n      image: registry.corp/nvidia/dcgm-exporter:4.1.1\n"), Options{Workload: workload.Policy{AllowedRegistries: []string{"registry.corp/nvidia"}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLoader(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "obj.yaml"), []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			err = load(t, l, dir)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "obj.yaml")):
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestOneMistakeOneProblem: a PyJob without a namespace is one problem,
// which names the fix, not also a schema error for the same field.
func TestOneMistakeOneProblem(t *testing.T) {
	l, err := NewLoader(Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "seeds", "bert-training.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "job.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	err = load(t, l, dir)
	var ie *InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("err %v, want an InvalidError", err)
	}
	if len(ie.Problems) != 1 || !strings.Contains(ie.Problems[0].Message, "metadata.namespace is required") || !strings.Contains(ie.Problems[0].Message, "namespace: in the kustomization") {
		t.Fatalf("want one problem naming the fix, got %d:\n%v", len(ie.Problems), err)
	}
}
