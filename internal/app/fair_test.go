// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/testenv"
)

// TestAnotherTeamsPyJobDoesNotWaitForALargeSync: while trainops's sync
// applies a revision of 1,500 PyJobs, an SREAgent and a ClusterPolicy of
// one team, a PyJob another team creates gets its Job before that sync is
// done, within 3 s or 3× the time it takes on a quiet cluster, whichever
// is longer, and so does another team's SREAgent its Deployment. The
// sync's own new objects get no child until it is done, then every one
// gets its children.
func TestAnotherTeamsPyJobDoesNotWaitForALargeSync(t *testing.T) {
	const big, team, other = 1500, "fair-big", "fair-other"
	repo, cfg := repoRun(t, "ml/fair.git", "trainops-fair")
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}); err != nil {
		t.Fatal(err)
	}
	repo.MustWrite(t, "cluster/namespace.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+team+"\n")
	repo.MustWrite(t, "cluster/kustomization.yaml", "resources:\n- namespace.yaml\n")
	first, err := repo.CommitAndPush("namespace")
	if err != nil {
		t.Fatal(err)
	}
	inventory := inventoryOf(c, cfg)
	applied := func(rev string) (bool, error) {
		inv, err := inventory()
		if err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return inv.LastAppliedRevision == "main@sha1:"+rev, nil
	}
	stop := running(t, cfg)
	defer stop()
	testenv.Eventually(t, 60*time.Second, func() error {
		if ok, err := applied(first); !ok || err != nil {
			return fmt.Errorf("first revision not applied yet (%v)", err)
		}
		return nil
	})

	// The other team's PyJob, created by hand: the time to its Job.
	timeToJob := func(name string) time.Duration {
		t.Helper()
		pj := &trainingv1alpha1.PyJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: name},
			Spec:       trainingv1alpha1.PyJobSpec{Image: "pytorch/pytorch:2.0-cuda11.7-cudnn8-devel", Command: []string{"python", "train.py"}, GPU: 1},
		}
		start := time.Now()
		if err := c.Create(ctx, pj); err != nil {
			t.Fatal(err)
		}
		for {
			err := c.Get(ctx, client.ObjectKey{Namespace: other, Name: name + "-job"}, &batchv1.Job{})
			if err == nil {
				return time.Since(start)
			}
			if time.Since(start) > 2*time.Minute {
				t.Fatalf("PyJob %s/%s has no Job after %s: %v", other, name, time.Since(start), err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// The first PyJob of the process also waits for what starts with it
	// (discovery of the Job API, the caches): the second is the quiet
	// cluster's.
	timeToJob("warm-up")
	quiet := timeToJob("quiet")
	bound := max(3*time.Second, 3*quiet)

	var files []string
	for i := range big {
		name := fmt.Sprintf("job-%04d.yaml", i)
		repo.MustWrite(t, "cluster/jobs/"+name, strings.ReplaceAll(pyjobYAML(fmt.Sprintf("job-%04d", i)), "namespace: ml-e2e", "namespace: "+team))
		files = append(files, "- jobs/"+name)
	}
	// The revision's SREAgent and ClusterPolicy, held like its PyJobs.
	repo.MustWrite(t, "cluster/agent.yaml", agentYAML(team, "fair-ops"))
	repo.MustWrite(t, "cluster/gpu.yaml", "apiVersion: gpu.trainops.dev/v1alpha1\nkind: ClusterPolicy\nmetadata:\n  name: fair-gpu\nspec:\n  driver:\n    version: \"535.104.05\"\n")
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "fair-gpu"}})
	})
	files = append(files, "- agent.yaml", "- gpu.yaml")
	repo.MustWrite(t, "cluster/kustomization.yaml", "resources:\n- namespace.yaml\n"+strings.Join(files, "\n")+"\n")
	second, err := repo.CommitAndPush("a large revision")
	if err != nil {
		t.Fatal(err)
	}
	// Once a fifth of the revision is in the cluster, and its PyJobs
	// queued for their reconciles, the other team creates one.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var list trainingv1alpha1.PyJobList
		if err := c.List(ctx, &list, client.InNamespace(team)); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) >= big/5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d PyJobs applied after 2 minutes", len(list.Items), big)
		}
		time.Sleep(20 * time.Millisecond)
	}
	otherAgent := &aiopsv1alpha1.SREAgent{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "other-ops"}, Spec: aiopsv1alpha1.SREAgentSpec{AutoRepair: true}}
	if err := c.Create(ctx, otherAgent); err != nil {
		t.Fatal(err)
	}
	busy := timeToJob("busy")
	// The other team's SREAgent, created beside its PyJob, is not held:
	// its Deployment comes while the sync still applies.
	agentDeployed := func(a *aiopsv1alpha1.SREAgent) error {
		return c.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: builder.AgentChildName(a)}, &appsv1.Deployment{})
	}
	testenv.Eventually(t, bound, func() error { return agentDeployed(otherAgent) })
	ownAgent := &aiopsv1alpha1.SREAgent{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "fair-ops"}}
	ownAgentHeld := apierrors.IsNotFound(agentDeployed(ownAgent))
	gpu := &gpuv1alpha1.ClusterPolicy{}
	ownPolicyHeld := true
	if err := c.Get(ctx, client.ObjectKey{Name: "fair-gpu"}, gpu); err == nil {
		ownPolicyHeld = len(gpu.Status.Conditions) == 0
	}
	var jobs metav1.PartialObjectMetadataList
	jobs.SetGroupVersionKind(batchv1.SchemeGroupVersion.WithKind("JobList"))
	if err := c.List(ctx, &jobs, client.InNamespace(team)); err != nil {
		t.Fatal(err)
	}
	done, err := applied(second)
	if err != nil {
		t.Fatal(err)
	}
	if !done && len(jobs.Items) > 0 {
		// The sync's own new objects wait while it applies them.
		t.Errorf("%d of the large revision's PyJobs had their Jobs while it was still being applied", len(jobs.Items))
	}
	if !done && !ownAgentHeld {
		t.Error("the large revision's SREAgent had its Deployment while the revision was still being applied")
	}
	if !done && !ownPolicyHeld {
		t.Errorf("the large revision's ClusterPolicy was reconciled while the revision was still being applied: %v", gpu.Status.Conditions)
	}
	t.Logf("another team's PyJob got its Job in %s on a quiet cluster, %s during the sync of %d PyJobs", quiet, busy, big)
	if done {
		t.Errorf("the large revision was applied before the other team's PyJob had its Job (%s)", busy)
	}
	if busy > bound {
		t.Errorf("another team's PyJob waited %s for its Job during the sync, more than %s (quiet: %s)", busy, bound, quiet)
	}

	// Once applied, every PyJob the sync held gets its Job: released by
	// the sync's status, well before a hold's own time bound.
	testenv.Eventually(t, 90*time.Second, func() error {
		if err := c.List(ctx, &jobs, client.InNamespace(team)); err != nil {
			return err
		}
		if len(jobs.Items) < big {
			return fmt.Errorf("%d of %d Jobs of the large revision", len(jobs.Items), big)
		}
		if err := agentDeployed(ownAgent); err != nil {
			return fmt.Errorf("the large revision's SREAgent: %w", err)
		}
		if err := c.Get(ctx, client.ObjectKey{Name: "fair-gpu"}, gpu); err != nil || len(gpu.Status.Conditions) == 0 {
			return fmt.Errorf("the large revision's ClusterPolicy has no status yet (%v)", err)
		}
		return nil
	})
	for _, kind := range []string{"PyJob", "SREAgent", "ClusterPolicy"} {
		if n := testenv.Metric(t, "trainops_reconciles_held_total", "kind", kind); n == 0 {
			t.Errorf("no %s reconcile was held while the sync applied its revision", kind)
		}
	}
}

// agentYAML is an SREAgent named name in ns, as a repository holds it.
func agentYAML(ns, name string) string {
	return "apiVersion: aiops.trainops.dev/v1alpha1\nkind: SREAgent\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\nspec:\n  autoRepair: true\n"
}
