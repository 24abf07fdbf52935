// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/testenv"
)

// TestAPIServerRestartDuringSync stops kube-apiserver and etcd in the middle
// of a sync of 300 PyJobs and starts them again: trainops retries by
// itself and converges, with one Job per PyJob.
func TestAPIServerRestartDuringSync(t *testing.T) {
	dir := t.TempDir()
	bin := testenv.BuildTrainops(t)
	srv, repo := gitRepo(t, "restart.git")
	repo.MustWrite(t, "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml-restart\n")
	const n = 300
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("job-%03d", i)
		repo.MustWrite(t, "jobs/"+name+".yaml", strings.ReplaceAll(pyjobYAML(name), "ml-e2e", "ml-restart"))
	}
	head, err := repo.CommitAndPush("300 jobs")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "trainops.log")
	cmd := startTrainops(t, bin, log, "--namespace=trainops-restart",
		"--repo-url="+srv.URL("restart.git"), "--reconcile-interval=2s", "--retry-delay=1s", "--leader-election=false",
		"--cache-dir="+filepath.Join(dir, "cache"), "--log-format=json")
	defer cmd.Stop(time.Minute)

	// Let the sync start, then take the control plane away for 3 s.
	testenv.Eventually(t, 30*time.Second, func() error {
		b, _ := os.ReadFile(log)
		if !strings.Contains(string(b), "Reconcile loop started") {
			return fmt.Errorf("sync not started")
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	if err := env.RestartAPIServer(3 * time.Second); err != nil {
		t.Fatal(err)
	}

	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	testenv.Eventually(t, 3*time.Minute, func() error {
		select {
		case <-cmd.Done():
			b, _ := os.ReadFile(log)
			t.Fatalf("trainops exited (%v); log:\n%s", cmd.Err(), tail(string(b), 20))
		default:
		}
		inv, err := gitops.ReadInventory(ctx, c, "trainops-restart", gitops.DefaultName)
		if err != nil {
			return err
		}
		if inv.LastError != "" || inv.LastAppliedRevision != "main@sha1:"+head {
			return fmt.Errorf("revision %q, error %q", inv.LastAppliedRevision, inv.LastError)
		}
		var pjs trainingv1alpha1.PyJobList
		if err := c.List(ctx, &pjs, client.InNamespace("ml-restart")); err != nil {
			return err
		}
		var jobs batchv1.JobList
		if err := c.List(ctx, &jobs, client.InNamespace("ml-restart")); err != nil {
			return err
		}
		if len(pjs.Items) != n || len(jobs.Items) != n {
			return fmt.Errorf("%d PyJobs and %d Jobs, want %d each", len(pjs.Items), len(jobs.Items), n)
		}
		return nil
	})
}
