// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/diff"
	"github.com/trainops/trainops/internal/offline"
)

// localRepo is a real Git repository on disk with a work tree.
type localRepo struct {
	t   testing.TB
	dir string
	r   *git.Repository
}

func newLocalRepo(t testing.TB) *localRepo {
	t.Helper()
	dir := t.TempDir()
	r, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	if err != nil {
		t.Fatal(err)
	}
	return &localRepo{t: t, dir: dir, r: r}
}

func (l *localRepo) write(path, content string) *localRepo {
	p := filepath.Join(l.dir, path)
	_ = os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		l.t.Fatal(err)
	}
	return l
}

func (l *localRepo) remove(path string) *localRepo {
	if err := os.Remove(filepath.Join(l.dir, path)); err != nil {
		l.t.Fatal(err)
	}
	return l
}

func (l *localRepo) commit(msg string) {
	wt, _ := l.r.Worktree()
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		l.t.Fatal(err)
	}
	if _, err := wt.Commit(msg, &git.CommitOptions{All: true, Author: &object.Signature{Name: "t", Email: "t@t", When: time.Unix(1700000000, 0)}}); err != nil {
		l.t.Fatal(err)
	}
}

func (l *localRepo) branch(name string) {
	wt, _ := l.r.Worktree()
	if err := wt.Checkout(&git.CheckoutOptions{Branch: plumbing.NewBranchReferenceName(name), Create: true}); err != nil {
		l.t.Fatal(err)
	}
}

func pj(name string, gpu string) string {
	return "apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: " + name + "\n  namespace: ml\nspec:\n  image: pytorch/pytorch:2.0\n  command: [python, train.py]\n  gpu: " + gpu + "\n"
}

const agentYAML = "apiVersion: aiops.trainops.dev/v1alpha1\nkind: SREAgent\nmetadata:\n  name: ops\n  namespace: ml\nspec:\n  autoRepair: %s\n"

const policyYAML = `apiVersion: gpu.trainops.dev/v1alpha1
kind: ClusterPolicy
metadata:
  name: gpu
spec:
  devicePlugin:
    config:
      sharing:
        timeSlicing:
          resources:
          - name: nvidia.com/gpu
            replicas: %s
`

// scenario commits a base on main and a change on branch feature: a PyJob
// created and one deleted, an SREAgent change that rolls its Deployment, a
// ClusterPolicy change that touches its DaemonSets.
func scenario(t *testing.T) *localRepo {
	l := newLocalRepo(t)
	l.write("ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml\n").
		write("jobs/a.yaml", pj("job-a", "1")).
		write("jobs/b.yaml", pj("job-b", "2")).
		write("agent.yaml", strings.Replace(agentYAML, "%s", "false", 1)).
		write("policy.yaml", strings.Replace(policyYAML, "%s", "4", 1))
	l.commit("base")
	l.branch("feature")
	l.write("jobs/c.yaml", pj("job-c", "4")).
		remove("jobs/b.yaml").
		write("agent.yaml", strings.Replace(agentYAML, "%s", "true", 1)).
		write("policy.yaml", strings.Replace(policyYAML, "%s", "8", 1))
	l.commit("feature")
	return l
}

func TestDiffBetweenRevisions(t *testing.T) {
	l := scenario(t)
	base := []string{"diff", "--repo", l.dir, "--base", "main", "--head", "feature", "--agent-image=ghcr.io/trainops/trainops:test"}
	for _, format := range []string{"text", "json", "markdown"} {
		t.Run(format, func(t *testing.T) {
			out, errOut, code := run(t, append(base, "-o", format)...)
			if code != ExitChanges {
				t.Fatalf("exit %d, want 1 (changes): %s", code, errOut)
			}
			golden(t, "diff."+format, out)
		})
	}
	out, _, _ := run(t, append(base, "-o", "json")...)
	var got struct {
		Changes []map[string]string `json:"changes"`
		Summary map[string]int      `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	has := func(action, kind, name, owner string) bool {
		for _, c := range got.Changes {
			if c["action"] == action && c["kind"] == kind && c["name"] == name && c["owner"] == owner {
				return true
			}
		}
		return false
	}
	for _, w := range []struct{ action, kind, name, owner string }{
		{"create", "PyJob", "job-c", ""},
		{"create", "Job", "job-c-job", "PyJob/ml/job-c"},
		{"delete", "PyJob", "job-b", ""},
		{"delete", "Job", "job-b-job", "PyJob/ml/job-b"},
		{"update", "SREAgent", "ops", ""},
		{"update", "Role", "sreagent-ops", "SREAgent/ml/ops"},
		{"update", "Deployment", "sreagent-ops", "SREAgent/ml/ops"},
		{"update", "ConfigMap", "nvidia-device-plugin-config", "ClusterPolicy/gpu"},
		{"update", "DaemonSet", "nvidia-device-plugin-daemonset", "ClusterPolicy/gpu"},
	} {
		if !has(w.action, w.kind, w.name, w.owner) {
			t.Errorf("no %+v in %s", w, out)
		}
	}
	for _, c := range got.Changes {
		if c["kind"] == "Job" && c["name"] == "job-a-job" {
			t.Errorf("unchanged job-a reported: %v", c)
		}
		if len(c) != 7 {
			t.Errorf("change has fields %v, want exactly action, apiVersion, kind, namespace, name, owner, diff", c)
		}
	}
}

func TestDiffWorkTreeFlagsRefusedChanges(t *testing.T) {
	l := scenario(t)
	// Uncommitted: job-a's GPUs change, which its Job cannot take.
	l.write("jobs/a.yaml", pj("job-a", "2"))
	out, _, code := run(t, "diff", "--repo", l.dir, "--base", "feature", "--no-color")
	if code != ExitChanges {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"~ update PyJob ml/job-a (jobs/a.yaml)", "will be refused", "gpu cannot change once the PyJob is created", "create a PyJob under a new name", "warning: PyJob ml/job-a will be refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("colour with --no-color")
	}
}

// TestDiffWarnsOfPathsWithoutStorage: a new PyJob whose outputPath has no
// storage is a change with a warning; the exit code is a change's.
func TestDiffWarnsOfPathsWithoutStorage(t *testing.T) {
	l := scenario(t)
	l.write("jobs/c.yaml", pj("job-c", "1")+"  outputPath: /out\n")
	out, _, code := run(t, "diff", "--repo", l.dir, "--base", "feature", "--no-color")
	if code != ExitChanges {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "jobs/c.yaml: PyJob ml/job-c: spec.outputPath: no spec.storage.output") {
		t.Errorf("no warning for the new job's outputPath:\n%s", out)
	}
	if strings.Contains(out, "job-a: spec.") {
		t.Errorf("a warning for an unchanged PyJob:\n%s", out)
	}
}

func TestDiffExitCodes(t *testing.T) {
	l := scenario(t)
	out, _, code := run(t, "diff", "--repo", l.dir, "--base", "feature")
	if code != ExitOK || !strings.Contains(out, "no changes") {
		t.Fatalf("clean work tree: exit %d, %q", code, out)
	}
	l.write("jobs/bad.yaml", pj("job-bad", "-1"))
	_, errOut, code := run(t, "diff", "--repo", l.dir, "--base", "feature")
	if code != ExitUsage || !strings.Contains(errOut, "jobs/bad.yaml") || !strings.Contains(errOut, "gpu cannot be negative") {
		t.Fatalf("invalid head: exit %d, %q; want 2 with the validate message", code, errOut)
	}
	_, errOut, code = run(t, "diff", "--repo", l.dir, "--base", "no-such-branch")
	if code != ExitUsage || !strings.Contains(errOut, "no-such-branch") {
		t.Fatalf("bad base: exit %d, %q", code, errOut)
	}
}

func TestDiffFlagsPrunesPastTheBudget(t *testing.T) {
	l := scenario(t)
	l.remove("jobs/a.yaml").remove("jobs/c.yaml").remove("agent.yaml")
	out, _, _ := run(t, "diff", "--repo", l.dir, "--base", "feature", "--no-color", "--prune-budget=2")
	if !strings.Contains(out, "past the prune budget") {
		t.Fatalf("no prune budget warning:\n%s", out)
	}
}

// TestDiffSkipsOnlyUnchangedWork holds the diff, which checks an object
// unchanged between the revisions once and builds its children in
// neither, to the diff of both revisions checked and expanded whole; and an
// invalid object is reported though it is unchanged.
func TestDiffSkipsOnlyUnchangedWork(t *testing.T) {
	loader, err := offline.NewLoader(offline.Options{AllowedKinds: check.DefaultAllowedKinds, Builder: builder.Options{AgentImage: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	// The diff equals the one of both revisions loaded and expanded whole.
	same := func(l *localRepo) {
		t.Helper()
		got, _, err := offlineDiff(loader, l.dir, "main", "feature", ".", config.Budget{Percent: 50})
		if err != nil {
			t.Fatal(err)
		}
		repo, err := gitsource.OpenLocal(l.dir)
		if err != nil {
			t.Fatal(err)
		}
		whole := func(rev string) []offline.Item {
			dir := t.TempDir()
			if _, err := repo.Extract(rev, dir); err != nil {
				t.Fatal(err)
			}
			objs, err := loader.Load(dir, ".")
			if err != nil {
				t.Fatal(err)
			}
			items, err := loader.Expand(objs)
			if err != nil {
				t.Fatal(err)
			}
			return items
		}
		want := diff.Compare(whole("main"), whole("feature"), loader.CheckUpdate, budgetFunc(config.Budget{Percent: 50}))
		var g, w strings.Builder
		if err := got.WriteJSON(&g); err != nil {
			t.Fatal(err)
		}
		if err := want.WriteJSON(&w); err != nil {
			t.Fatal(err)
		}
		if g.String() != w.String() || got.Empty() {
			t.Fatalf("diff:\n%s\nwant, from both revisions whole:\n%s", g.String(), w.String())
		}
	}
	same(scenario(t))

	// A PyJob whose file moved is parsed anew in the head, a second object
	// equal to the base's: unchanged all the same, CRD defaults and all.
	moved := newLocalRepo(t)
	moved.write("jobs/a.yaml", pj("job-a", "1")).write("jobs/b.yaml", pj("job-b", "1"))
	moved.commit("base")
	moved.branch("feature")
	moved.remove("jobs/a.yaml").write("jobs/old/a.yaml", pj("job-a", "1")).write("jobs/b.yaml", pj("job-b", "2"))
	moved.commit("feature")
	same(moved)

	// A PyJob the schema refuses, the same in both revisions.
	bad := newLocalRepo(t)
	bad.write("jobs/bad.yaml", strings.Replace(pj("job-bad", "1"), "spec:\n", "spec:\n  bogus: 1\n", 1)).
		write("jobs/a.yaml", pj("job-a", "1"))
	bad.commit("base")
	bad.branch("feature")
	bad.write("jobs/a.yaml", pj("job-a", "2"))
	bad.commit("feature")
	if _, _, err := offlineDiff(loader, bad.dir, "main", "feature", ".", config.Budget{Percent: 50}); err == nil || !strings.Contains(err.Error(), "job-bad") || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("an invalid PyJob unchanged between the revisions: error %v, want it named with its field", err)
	}
}
