// SPDX-License-Identifier: Apache-2.0

package kueuetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/capacity"
	"github.com/trainops/trainops/internal/cli"
	"github.com/trainops/trainops/internal/testenv"
)

// planRepo writes a repository of PyJobs (name: workers × gpus) on the
// queue "team" of ns.
func planRepo(t *testing.T, ns string, jobs map[string][2]int) string {
	t.Helper()
	dir := t.TempDir()
	// The base revision has no PyJob; the work tree, the head, adds them.
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("resources: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	if err != nil {
		t.Fatal(err)
	}
	wt, err := r.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := wt.Commit("base", &git.CommitOptions{Author: &object.Signature{Name: "t", Email: "t@example.com", When: time.Unix(1700000000, 0)}}); err != nil {
		t.Fatal(err)
	}
	var docs []string
	for name, size := range jobs {
		docs = append(docs, fmt.Sprintf(`apiVersion: training.trainops.dev/v1alpha1
kind: PyJob
metadata: {name: %s, namespace: %s}
spec: {image: registry.example.com/train:1, command: [python, train.py], workers: %d, gpu: %d, queueName: team}
`, name, ns, size[0], size[1]))
	}
	files := map[string]string{
		"kustomization.yaml": "resources: [jobs.yaml]\n",
		"jobs.yaml":          strings.Join(docs, "---\n"),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// diffPlan runs `trainops diff -o json` with args and returns its plan and
// exit status.
func diffPlan(t *testing.T, args ...string) (*capacity.Plan, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Execute(append([]string{"diff", "-o", "json"}, args...), &out, &errOut)
	var report struct {
		Capacity *capacity.Plan `json:"capacity"`
	}
	if err := json.Unmarshal(out.Bytes(), &report); err != nil || report.Capacity == nil {
		t.Fatalf("diff %v: exit %d, no plan (%v): %s %s", args, code, err, out.String(), errOut.String())
	}
	return report.Capacity, errOut.String(), code
}

// TestDiffPlansTheChangeAgainstKueue: with a running PyJob holding all 8
// GPUs of its ClusterQueue, diff --cluster says a new 2 × 4 PyJob waits
// (with Kueue's own count of what is in use), a PyJob whose worker asks 16
// GPUs can never run on nodes of 8 and one of 3 × 4 never within the
// quota of 8, failing the diff; a saved list of the same objects
// (--capacity) plans it alike. Then Kueue, given the same PyJobs, does
// what the plan said.
func TestDiffPlansTheChangeAgainstKueue(t *testing.T) {
	ctx := context.Background()
	ns := testenv.NewNamespace(t, k8s)
	cq := queues(t, ns, 8)
	running := newPyJob(ns, "running", longImage, 2, 4)
	createPyJob(t, running)
	waitPhase(t, ns, running.Name, trainingv1alpha1.PyJobRunning, 60*time.Second, "2/2 workers running")
	// Kueue counts the admitted workload in its ClusterQueue's status.
	testenv.Eventually(t, 30*time.Second, func() error {
		u := testenv.KueueObject("ClusterQueue", "", cq, nil)
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return err
		}
		if n, _, _ := unstructured.NestedInt64(u.Object, "status", "admittedWorkloads"); n != 1 {
			return fmt.Errorf("admittedWorkloads %d", n)
		}
		return nil
	})
	repo := planRepo(t, ns, map[string][2]int{"next": {2, 4}, "wide": {1, 16}, "big": {3, 4}})
	common := []string{"--repo=" + repo, "--allowed-kinds=PyJob.training.trainops.dev"}

	check := func(p *capacity.Plan, errOut string, code int) {
		t.Helper()
		got := map[string]capacity.Verdict{}
		for _, v := range p.Jobs {
			got[strings.TrimPrefix(v.PyJob, ns+"/")] = v
		}
		if v := got["next"]; v.Result != capacity.Waits || !strings.Contains(v.Why, "has 0 free") || v.ClusterQueue != cq {
			t.Errorf("next: %+v", v)
		}
		if v := got["wide"]; v.Result != capacity.NeverFits || !strings.Contains(v.Why, "largest node offers 8") {
			t.Errorf("wide: %+v", v)
		}
		if v := got["big"]; v.Result != capacity.NeverFits || !strings.Contains(v.Why, "asks 12") || !strings.Contains(v.Why, "(8)") {
			t.Errorf("big: %+v", v)
		}
		if code != cli.ExitUsage || !strings.Contains(errOut, "can never run") || !strings.Contains(errOut, ns+"/wide") {
			t.Errorf("exit %d, %q: want the never-fitting PyJob to fail the diff", code, errOut)
		}
		var flavor *capacity.Flavor
		for _, c := range p.ClusterQueues {
			if c.Name == cq {
				flavor = &c.Flavor[0]
			}
		}
		if flavor == nil || flavor.Quota != 8 || flavor.InUse != 8 {
			t.Errorf("ClusterQueue %s in the plan: %+v", cq, flavor)
		}
	}
	p, errOut, code := diffPlan(t, append(common, "--cluster", "--kubeconfig="+env.Kubeconfig)...)
	if p.Source != "the cluster" {
		t.Errorf("source %q", p.Source)
	}
	check(p, errOut, code)

	// The same objects saved, as a CI job without the cluster gets them.
	saved := savedObjects(t)
	p, errOut, code = diffPlan(t, append(common, "--capacity="+saved, "--base=main")...)
	check(p, errOut, code)

	// Kueue then does what the plan said: the 2 × 4 waits for what is in
	// use and runs once it is free; the 3 × 4 is never admitted.
	next, big := newPyJob(ns, "next", longImage, 2, 4), newPyJob(ns, "big", longImage, 3, 4)
	createPyJob(t, next)
	createPyJob(t, big)
	waitPhase(t, ns, next.Name, trainingv1alpha1.PyJobQueued, 60*time.Second, "insufficient unused quota")
	waitPhase(t, ns, big.Name, trainingv1alpha1.PyJobQueued, 60*time.Second, "current podset request (12) > maximum capacity (8)")
	deletePyJob(t, running)
	waitPhase(t, ns, next.Name, trainingv1alpha1.PyJobRunning, 60*time.Second, "2/2 workers running")
	waitPhase(t, ns, big.Name, trainingv1alpha1.PyJobQueued, 10*time.Second, "maximum capacity (8)")
	if pods := workerPods(t, ns, big.Name); len(pods) != 0 {
		t.Errorf("%d pods of the PyJob that never fits", len(pods))
	}
}

// savedObjects writes the cluster's ClusterQueues, LocalQueues and Nodes
// as `kubectl get -o yaml` does (a List) and returns its path.
func savedObjects(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var items []any
	for _, kind := range []string{"ClusterQueueList", "LocalQueueList"} {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("kueue.x-k8s.io/v1beta2")
		list.SetKind(kind)
		if err := k8s.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		for _, u := range list.Items {
			items = append(items, u.Object)
		}
	}
	var nodes corev1.NodeList
	if err := k8s.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	for i := range nodes.Items {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&nodes.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		u["apiVersion"], u["kind"] = "v1", "Node"
		items = append(items, u)
	}
	raw, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "capacity.json")
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
