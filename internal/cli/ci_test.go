// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// ciCommands are the trainops commands docs/ci.md's pipelines run, per
// fenced block, as argument lists: output redirection and the exit-code
// handling after them dropped, $BASE_REF as the pipelines set it.
func ciCommands(t *testing.T) [][][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "ci.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][][]string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			if in = !in; in {
				blocks = append(blocks, nil)
			}
			continue
		}
		cmd := strings.TrimPrefix(strings.TrimSpace(line), "- ")
		if !in || !strings.HasPrefix(cmd, "trainops ") {
			continue
		}
		for _, cut := range []string{" > ", " || "} {
			cmd, _, _ = strings.Cut(cmd, cut)
		}
		var args []string
		for _, w := range strings.Fields(cmd)[1:] {
			args = append(args, strings.ReplaceAll(strings.Trim(w, `"`), "$BASE_REF", "origin/main"))
		}
		blocks[len(blocks)-1] = append(blocks[len(blocks)-1], args)
	}
	return blocks
}

// TestCIPageCommands runs the commands of docs/ci.md's GitHub Actions and
// GitLab CI pipelines on a real repository with a base and two overlays:
// a pull request adding a PyJob validates, and its diff shows the PyJob and
// its Job as Markdown.
func TestCIPageCommands(t *testing.T) {
	blocks := ciCommands(t)
	if len(blocks) != 2 || len(blocks[0]) != 2 || len(blocks[1]) != 2 {
		t.Fatalf("docs/ci.md: want two pipelines of two trainops commands each, got %q", blocks)
	}
	l := newLocalRepo(t)
	l.write("base/kustomization.yaml", "resources:\n- ns.yaml\n- jobs/a.yaml\n").
		write("base/ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml\n").
		write("base/jobs/a.yaml", pj("job-a", "1")).
		write("clusters/dev/kustomization.yaml", "resources:\n- ../../base\n").
		write("clusters/prod/kustomization.yaml", "resources:\n- ../../base\npatches:\n- target:\n    kind: PyJob\n  patch: |\n    - op: replace\n      path: /spec/gpu\n      value: 2\n")
	l.commit("base")
	// The pipelines compare with the target branch as fetched: origin/main.
	head, err := l.r.Head()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.r.Storer.SetReference(plumbing.NewHashReference(plumbing.NewRemoteReferenceName("origin", "main"), head.Hash())); err != nil {
		t.Fatal(err)
	}
	l.branch("feature")
	l.write("base/jobs/b.yaml", pj("job-b", "1")).
		write("base/kustomization.yaml", "resources:\n- ns.yaml\n- jobs/a.yaml\n- jobs/b.yaml\n")
	l.commit("a second job")
	t.Chdir(l.dir)

	for i, block := range blocks {
		for _, args := range block {
			out, errOut, code := run(t, args...)
			switch args[0] {
			case "validate":
				if code != ExitOK || !strings.Contains(out, "base: valid") || !strings.Contains(out, "clusters/dev: valid") || !strings.Contains(out, "clusters/prod: valid") {
					t.Errorf("pipeline %d: %q: exit %d\n%s%s", i, args, code, out, errOut)
				}
			case "diff":
				if code != ExitChanges || !strings.Contains(out, "PyJob ml/job-b") || !strings.Contains(out, "job-b-job") || !strings.Contains(out, "gpu: 2") || strings.Contains(out, "job-a") {
					t.Errorf("pipeline %d: %q: exit %d\n%s%s", i, args, code, out, errOut)
				}
			default:
				t.Errorf("pipeline %d runs %q, which this test does not check", i, args)
			}
		}
	}
}
