// SPDX-License-Identifier: Apache-2.0

package kueuetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/crdschema"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/scheme"
	"github.com/trainops/trainops/internal/testenv"
)

// syncEngine is a sync engine allowing Kueue's queues beside the default
// kinds, acting as the admin.
func syncEngine(t *testing.T, name string) *gitops.Engine {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.New(), Mapper: mapper, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	schemas, err := crdschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	kinds := append([]schema.GroupKind{}, check.DefaultAllowedKinds...)
	for _, k := range []string{"ResourceFlavor", "ClusterQueue", "LocalQueue"} {
		kinds = append(kinds, schema.GroupKind{Group: "kueue.x-k8s.io", Kind: k})
	}
	e := &gitops.Engine{Client: c, Mapper: mapper, Schemas: schemas, Opts: gitops.Options{
		Name: name, Namespace: name, Path: ".", Repo: "https://git.example/" + name,
		AllowedKinds: kinds, Prune: true, PruneBudget: config.Budget{Percent: 50}, Force: true, Concurrency: 4,
	}}
	if err := e.Connect(cfg, hc); err != nil {
		t.Fatal(err)
	}
	return e
}

// writeRevision writes files into dir, a checkout.
func writeRevision(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestQueuesFromTheRepositoryAdmitItsPyJobs: a training-config repository
// holding its own ResourceFlavor, ClusterQueue and LocalQueue (allowed by
// the sync's allowedKinds) is synced with a PyJob on that queue, which
// Kueue admits and runs. A revision whose ClusterQueue breaks one of
// Kueue's rules is refused whole, naming the file, object and field:
// its new PyJob is not created and the queue keeps its quota.
func TestQueuesFromTheRepositoryAdmitItsPyJobs(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	e := syncEngine(t, "sync-"+ns)
	cq := "repo-" + ns
	queuesYAML := func(covered string) string {
		return fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: repo-%[1]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %[2]s}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [%[3]s]
    flavors:
    - name: repo-%[1]s
      resources:
      - {name: cpu, nominalQuota: "1k"}
      - {name: memory, nominalQuota: 10Ti}
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team, namespace: %[1]s}
spec: {clusterQueue: %[2]s}
`, ns, cq, covered)
	}
	pyjob := func(name string) string {
		return fmt.Sprintf("apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata: {name: %s, namespace: %s}\nspec: {image: registry.trainops.test/trainer:v1, command: [python, train.py], workers: 2, gpu: 4, queueName: team}\n", name, ns)
	}
	dir := t.TempDir()
	writeRevision(t, dir, map[string]string{
		"kustomization.yaml": "resources: [queues.yaml, jobs.yaml]\n",
		"queues.yaml":        queuesYAML("cpu, memory, nvidia.com/gpu"),
		"jobs.yaml":          pyjob("first"),
	})
	if _, err := e.Sync(ctx, dir, "rev-1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{testenv.KueueObject("ClusterQueue", "", cq, nil), testenv.KueueObject("ResourceFlavor", "", "repo-"+ns, nil)} {
			_ = k8s.Delete(context.Background(), o)
		}
	})
	waitPhase(t, ns, "first", trainingv1alpha1.PyJobSucceeded, 90*time.Second)

	// Two covered resources too few for three quotas: Kueue's own rule.
	writeRevision(t, dir, map[string]string{
		"queues.yaml": queuesYAML("cpu, nvidia.com/gpu"),
		"jobs.yaml":   pyjob("first") + "---\n" + pyjob("second"),
	})
	_, err := e.Sync(ctx, dir, "rev-2")
	var se *gitops.SyncError
	if !errors.As(err, &se) {
		t.Fatalf("a revision with a bad ClusterQueue synced: %v", err)
	}
	for _, want := range []string{"queues.yaml", "ClusterQueue " + cq, "spec.resourceGroups[0]", "coveredResources"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err.Error(), want)
		}
	}
	// The sync returned its verdict: nothing of rev-2 was applied.
	second := &trainingv1alpha1.PyJob{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "second"}, second); !apierrors.IsNotFound(err) {
		t.Errorf("the bad revision's PyJob exists: %v", err)
	}
	u := testenv.KueueObject("ClusterQueue", "", cq, nil)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		t.Fatal(err)
	}
	if groups, _, _ := unstructured.NestedSlice(u.Object, "spec", "resourceGroups"); !strings.Contains(fmt.Sprint(groups), "memory") {
		t.Errorf("the ClusterQueue changed: %v", groups)
	}
}
