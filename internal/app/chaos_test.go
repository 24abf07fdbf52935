// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/testenv"
)

// TestSIGKILLDuringSyncs kills trainops at random points of syncs that
// apply and prune, over several seeds, and checks that it converges to Git
// every time it is restarted: nothing owned is lost or left behind, and no
// PyJob's Job is ever recreated.
func TestSIGKILLDuringSyncs(t *testing.T) {
	dir := t.TempDir()
	bin := testenv.BuildTrainops(t)
	srv, repo := gitRepo(t, "chaos.git")
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pj := func(name string) string { return strings.ReplaceAll(pyjobYAML(name), "ml-e2e", "ml-chaos") }
	repo.MustWrite(t, "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml-chaos\n")

	run := func() *testenv.Process {
		return startTrainops(t, bin, filepath.Join(dir, "trainops.log"), "--namespace=trainops-chaos",
			"--repo-url="+srv.URL("chaos.git"), "--reconcile-interval=1s", "--leader-election=false",
			"--cache-dir="+filepath.Join(dir, "cache"), "--prune-budget=100%")
	}
	jobUIDs := map[string]types.UID{} // PyJob name -> its Job's UID, once seen
	want := map[string]bool{}
	checkJobs := func() {
		t.Helper()
		var jobs batchv1.JobList
		if err := c.List(ctx, &jobs, client.InNamespace("ml-chaos")); err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs.Items {
			owner := strings.TrimSuffix(j.Name, "-job")
			if uid, seen := jobUIDs[owner]; seen && uid != j.UID && j.DeletionTimestamp == nil {
				t.Fatalf("the Job of PyJob %s was recreated (%s -> %s); %s", owner, uid, j.UID, jobOwner(ctx, c, &j, want[owner], filepath.Join(dir, "trainops.log")))
			}
			jobUIDs[owner] = j.UID
		}
	}
	kills := 0
	for seed := int64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewSource(seed))
		// Each round adds 40 PyJobs and removes a third of the rest.
		for i := 0; i < 40; i++ {
			name := fmt.Sprintf("job-%d-%02d", seed, i)
			repo.MustWrite(t, "jobs/"+name+".yaml", pj(name))
			want[name] = true
		}
		for name := range want {
			if rng.Intn(3) == 0 && !strings.HasPrefix(name, fmt.Sprintf("job-%d-", seed)) {
				repo.MustRemove(t, "jobs/"+name+".yaml")
				delete(want, name)
				delete(jobUIDs, name) // pruned with its PyJob
			}
		}
		if _, err := repo.CommitAndPush(fmt.Sprintf("round %d", seed)); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 8; k++ {
			cmd := run()
			time.Sleep(time.Duration(50+rng.Intn(1500)) * time.Millisecond)
			cmd.Kill()
			kills++
			checkJobs()
		}
	}
	// Restarted for good, it converges to Git.
	cmd := run()
	defer cmd.Stop(time.Minute)
	testenv.Eventually(t, 90*time.Second, func() error {
		inv, err := gitops.ReadInventory(ctx, c, "trainops-chaos", gitops.DefaultName)
		if err != nil {
			return err
		}
		if inv.LastError != "" {
			return fmt.Errorf("last error: %s", inv.LastError)
		}
		var list trainingv1alpha1.PyJobList
		if err := c.List(ctx, &list, client.InNamespace("ml-chaos")); err != nil {
			return err
		}
		got := map[string]bool{}
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				got[p.Name] = true
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("%d PyJobs, want %d", len(got), len(want))
		}
		var jobs batchv1.JobList
		if err := c.List(ctx, &jobs, client.InNamespace("ml-chaos")); err != nil {
			return err
		}
		live := 0
		for _, j := range jobs.Items {
			if j.DeletionTimestamp == nil && want[strings.TrimSuffix(j.Name, "-job")] {
				live++
			}
		}
		if live != len(want) {
			return fmt.Errorf("%d Jobs, want %d", live, len(want))
		}
		return nil
	})
	checkJobs()
	if len(inventoryEntries(t, c, ctx)) != len(want)+1 {
		t.Fatalf("inventory has %d entries, want %d (the PyJobs and the namespace)", len(inventoryEntries(t, c, ctx)), len(want)+1)
	}
	t.Logf("%d kills over 3 seeds; converged to %d PyJobs", kills, len(want))
}

func inventoryEntries(t *testing.T, c client.Client, ctx context.Context) map[string]gitops.Entry {
	t.Helper()
	inv, err := gitops.ReadInventory(ctx, c, "trainops-chaos", gitops.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	return inv.Entries
}

// jobOwner says, for a failure message, who owns job, whether that owner
// still exists and is still in Git, and what trainops logged of it.
func jobOwner(ctx context.Context, c client.Client, job *batchv1.Job, inGit bool, logPath string) string {
	name := strings.TrimSuffix(job.Name, "-job")
	var pj trainingv1alpha1.PyJob
	err := c.Get(ctx, types.NamespacedName{Namespace: job.Namespace, Name: name}, &pj)
	raw, _ := os.ReadFile(logPath)
	var logged []string
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.Contains(l, `"`+name+`"`) {
			logged = append(logged, l)
		}
	}
	return fmt.Sprintf("the new Job's owners %v, created %s; the PyJob: in Git %t, UID %s, deleting %t, status %+v, error %v; trainops logged of it:\n%s",
		job.OwnerReferences, job.CreationTimestamp, inGit, pj.UID, pj.DeletionTimestamp != nil, pj.Status, err, strings.Join(logged[max(0, len(logged)-20):], "\n"))
}
