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

	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/signature"
	"github.com/trainops/trainops/internal/testenv"
)

// replica is one `trainops run` process.
type replica struct {
	cmd  *testenv.Process
	log  string
	hook string
}

func (r *replica) logText() string {
	b, _ := os.ReadFile(r.log)
	return string(b)
}

func (r *replica) synced() bool { return strings.Contains(r.logText(), "Reconcile finished") }

// TestTwoReplicasOneWriter runs two leader-elected processes: only the
// leader syncs, a webhook reaching the follower still syncs, and when the
// leader stops the other takes over without re-applying or pruning.
func TestTwoReplicasOneWriter(t *testing.T) {
	dir := t.TempDir()
	bin := testenv.BuildTrainops(t)
	srv, repo := gitRepo(t, "ha.git")
	pj := func(name string) string { return strings.ReplaceAll(pyjobYAML(name), "ml-e2e", "ml-ha") }
	repo.MustWrite(t, "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml-ha\n")
	for _, n := range []string{"a", "b", "c"} {
		repo.MustWrite(t, "jobs/"+n+".yaml", pj("job-"+n))
	}
	if _, err := repo.CommitAndPush("three jobs"); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "hook")
	_ = os.WriteFile(secret, []byte(hookSecret), 0o600)
	start := func(name string) *replica {
		r := &replica{log: filepath.Join(dir, name+".log"), hook: freeAddr(t)}
		r.cmd = startTrainops(t, bin, r.log, "--namespace=trainops-ha",
			"--repo-url="+srv.URL("ha.git"), "--reconcile-interval=1h", "--leader-election",
			"--webhook-bind-address="+r.hook, "--webhook-secret-file="+secret,
			"--cache-dir="+filepath.Join(dir, name+"-cache"), "--log-format=json")
		return r
	}
	one := start("one")
	testenv.Eventually(t, 60*time.Second, func() error {
		if !one.synced() {
			return fmt.Errorf("first replica has not synced; its log:\n%s", tail(one.logText(), 20))
		}
		return nil
	})
	two := start("two") // starts as the follower
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// A push announced to the follower is synced by the leader.
	repo.MustWrite(t, "jobs/d.yaml", pj("job-d"))
	if _, err := repo.CommitAndPush("fourth job"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		return signature.Push("http://"+two.hook+"/hook", []byte(hookSecret))
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: "ml-ha", Name: "job-d"}, &trainingv1alpha1.PyJob{})
	})
	if two.synced() {
		t.Fatal("the follower synced while the other replica led")
	}

	// The leader stops; the follower takes over, applying and pruning
	// nothing.
	versions := func() map[string]string {
		var list trainingv1alpha1.PyJobList
		if err := c.List(ctx, &list, client.InNamespace("ml-ha")); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range list.Items {
			out[p.Name] = p.ResourceVersion
		}
		return out
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		// Let the reconcilers finish with the new job's status: every
		// job as far on as the first, and nothing written for a second.
		var list trainingv1alpha1.PyJobList
		if err := c.List(ctx, &list, client.InNamespace("ml-ha")); err != nil {
			return err
		}
		phases := map[string]trainingv1alpha1.PyJobPhase{}
		for _, p := range list.Items {
			phases[p.Name] = p.Status.Phase
		}
		if phases["job-d"] == "" || phases["job-d"] != phases["job-a"] {
			return fmt.Errorf("job-d is not as far on as job-a: %v", phases)
		}
		a := versions()
		time.Sleep(time.Second)
		if fmt.Sprint(a) != fmt.Sprint(versions()) {
			return fmt.Errorf("still changing")
		}
		return nil
	})
	before := versions()
	one.cmd.Stop(time.Minute)
	testenv.Eventually(t, 60*time.Second, func() error {
		if !two.synced() {
			return fmt.Errorf("the second replica has not taken over")
		}
		return nil
	})
	if !strings.Contains(two.logText(), `"applied":0`) || !strings.Contains(two.logText(), `"pruned":0`) {
		t.Errorf("the new leader's first sync changed something:\n%s", two.logText())
	}
	if after := versions(); fmt.Sprint(after) != fmt.Sprint(before) || len(after) != 4 {
		t.Fatalf("after the handover: %v, before %v", after, before)
	}

	// Killed without releasing its lease, a leader is replaced once the
	// lease expires (15 s).
	three := start("three")
	time.Sleep(2 * time.Second) // three is following
	two.cmd.Kill()
	killed := time.Now()
	testenv.Eventually(t, 45*time.Second, func() error {
		if !three.synced() {
			return fmt.Errorf("the third replica has not taken over")
		}
		return nil
	})
	if took := time.Since(killed); took > 30*time.Second {
		t.Errorf("the handover after a kill took %s, more than the 15 s lease and a retry period", took)
	}
	if after := versions(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("after the second handover: %v, before %v", after, before)
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
