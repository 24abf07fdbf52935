// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainops/trainops/internal/testenv"
)

// kueueKinds allows a repository's Kueue queues beside trainops's kinds.
const kueueKinds = "--allowed-kinds=PyJob.training.trainops.dev,Namespace,ClusterQueue.kueue.x-k8s.io,LocalQueue.kueue.x-k8s.io,ResourceFlavor.kueue.x-k8s.io"

// kueueRepo writes a repository of a namespace, Kueue's queues (queues
// the file queues.yaml) and a PyJob submitted to them.
func kueueRepo(t *testing.T, queues string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"kustomization.yaml": "resources: [namespace.yaml, queues.yaml, job.yaml]\n",
		"namespace.yaml":     "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n",
		"queues.yaml":        queues,
		"job.yaml": `apiVersion: training.trainops.dev/v1alpha1
kind: PyJob
metadata: {name: bert, namespace: team-a}
spec: {image: registry.example.com/bert:1, command: [python, train.py], workers: 2, gpu: 4, queueName: team}
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// kueueQueues is a flavor, a ClusterQueue whose flavor covers resources
// (a YAML list of {name, nominalQuota}) and a LocalQueue.
func kueueQueues(resources string) string {
	return `apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: research}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: a100
      resources: ` + resources + `
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team, namespace: team-a}
spec: {clusterQueue: research}
`
}

func kueueCRDDir(t *testing.T) string {
	t.Helper()
	dir, err := testenv.KueueDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "crds")
}

// TestValidateOtherProjectsKindsWithTheirCRDs: Kueue's queues in a
// repository are refused as unknown without their CRDs, saying how to give
// them; valid with Kueue's own CRDs from a folder or from the cluster; and
// a queue breaking one of Kueue's CEL rules is refused naming the file,
// the object and the field.
func TestValidateOtherProjectsKindsWithTheirCRDs(t *testing.T) {
	good := kueueRepo(t, kueueQueues("[{name: cpu, nominalQuota: 64}, {name: nvidia.com/gpu, nominalQuota: 16}]"))
	out, errOut, code := run(t, "validate", good, kueueKinds)
	if code != ExitChanges || !strings.Contains(out+errOut, "unknown kind kueue.x-k8s.io/v1beta2/ClusterQueue") || !strings.Contains(out+errOut, "--crds DIR") {
		t.Fatalf("without Kueue's CRDs: exit %d, %q %q", code, out, errOut)
	}
	crds := kueueCRDDir(t)
	out, errOut, code = run(t, "validate", good, kueueKinds, "--crds="+crds)
	if code != ExitOK || !strings.Contains(out, "valid: 5 objects, 1 ClusterQueue, 1 LocalQueue") {
		t.Fatalf("with --crds: exit %d, %q %q", code, out, errOut)
	}

	// Two covered resources, one quota: Kueue's own rule refuses it.
	bad := kueueRepo(t, kueueQueues("[{name: nvidia.com/gpu, nominalQuota: 16}]"))
	out, errOut, code = run(t, "validate", bad, kueueKinds, "--crds="+crds)
	for _, want := range []string{"queues.yaml", "ClusterQueue research", "spec.resourceGroups[0]", "same number of resources as the coveredResources"} {
		if code != ExitChanges || !strings.Contains(out+errOut, want) {
			t.Fatalf("bad ClusterQueue: exit %d, %q %q does not say %q", code, out, errOut, want)
		}
	}
	if strings.Contains(out, "valid:") {
		t.Errorf("a bad queue was also reported valid: %q", out)
	}

	// From the cluster: the CRDs it serves.
	out, errOut, code = run(t, "validate", good, kueueKinds, "--cluster", "--kubeconfig="+env.Kubeconfig)
	if code != ExitChanges || !strings.Contains(out+errOut, "unknown kind kueue.x-k8s.io/v1beta2/ClusterQueue") {
		t.Fatalf("a cluster without Kueue: exit %d, %q %q", code, out, errOut)
	}
	// A cluster that serves Kueue: an API server of its own with Kueue's
	// CRDs, so the package's other tests keep planning against a cluster
	// without Kueue and nothing waits for CRDs to be deleted.
	kueueEnv, err := testenv.Start(context.Background(), testenv.Options{CRDPaths: []string{crds}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kueueEnv.Stop(); err != nil {
			t.Error(err)
		}
	})
	out, errOut, code = run(t, "validate", good, kueueKinds, "--cluster", "--kubeconfig="+kueueEnv.Kubeconfig)
	if code != ExitOK || !strings.Contains(out, "valid: 5 objects, 1 ClusterQueue") {
		t.Fatalf("with the cluster's CRDs: exit %d, %q %q", code, out, errOut)
	}
	out, errOut, code = run(t, "validate", bad, kueueKinds, "--cluster", "--kubeconfig="+kueueEnv.Kubeconfig)
	if code != ExitChanges || !strings.Contains(out+errOut, "same number of resources as the coveredResources") {
		t.Fatalf("bad ClusterQueue, the cluster's CRDs: exit %d, %q %q", code, out, errOut)
	}
}

// TestReadCRDsNamesTheFile: a folder with a broken CRD is refused naming
// the file, and one with none says so.
func TestReadCRDsNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "queues.yaml"), []byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x.example.com}\nspec: {group: example.com, nope: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "validate", kueueRepo(t, kueueQueues("[]")), kueueKinds, "--crds="+dir)
	if code != ExitUsage || !strings.Contains(errOut, "queues.yaml") || !strings.Contains(errOut, "x.example.com") || !strings.Contains(errOut, "nope") {
		t.Fatalf("broken CRD: exit %d, %q %q", code, out, errOut)
	}
	empty := t.TempDir()
	out, errOut, code = run(t, "validate", kueueRepo(t, kueueQueues("[]")), kueueKinds, "--crds="+empty)
	if code != ExitUsage || !strings.Contains(errOut, "no CustomResourceDefinition") {
		t.Fatalf("empty folder: exit %d, %q %q", code, out, errOut)
	}
}
