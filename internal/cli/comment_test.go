// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trainops/trainops/internal/notify"
	"github.com/trainops/trainops/internal/testenv"
)

// TestDiffCommentsOnThePullRequest: `diff --comment-pr` posts its markdown
// as one comment on a real Gitea's pull request, and on the next push
// updates that comment instead of adding one; the token is in no output.
func TestDiffCommentsOnThePullRequest(t *testing.T) {
	ctx := context.Background()
	g, err := testenv.StartGitea(ctx, filepath.Join(t.TempDir(), "gitea"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	const repo = "training-config"
	if _, err := g.CreateRepo(ctx, repo); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "work")
	configMap := func(name string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: ml\n", name)
	}
	if _, err := g.Push(ctx, work, repo, map[string]string{"first.yaml": configMap("first"), "kustomization.yaml": "resources:\n- first.yaml\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.PushBranch(ctx, work, repo, "change", map[string]string{"second.yaml": configMap("second"), "kustomization.yaml": "resources:\n- first.yaml\n- second.yaml\n"}); err != nil {
		t.Fatal(err)
	}
	// Gitea learns of a pushed branch in the background: a pull request
	// of it can be opened once it has.
	var pr int
	testenv.Eventually(t, 30*time.Second, func() (err error) {
		pr, err = g.OpenPull(ctx, repo, "change", "main")
		return err
	})
	t.Setenv(ForgeTokenEnv, g.Token)
	args := []string{"diff", "--repo", work, "--base", "main", "--no-color",
		"--comment-pr", fmt.Sprint(pr), "--comment-provider", notify.Gitea, "--comment-repo", g.RepoURL(repo)}
	comments := func() []string {
		t.Helper()
		cs, err := g.Comments(ctx, repo, pr)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}

	out, errOut, code := run(t, args...)
	if code != ExitChanges || !strings.Contains(errOut, "posted the diff") {
		t.Fatalf("first diff: exit %d\n%s%s", code, out, errOut)
	}
	cs := comments()
	if len(cs) != 1 || !strings.HasPrefix(cs[0], notify.CommentMarker) || !strings.Contains(cs[0], "ConfigMap ml/second") {
		t.Fatalf("comments after the first diff: %q", cs)
	}

	// The next push: the same comment says the new diff.
	if _, err := g.PushBranch(ctx, work, repo, "change", map[string]string{"third.yaml": configMap("third"), "kustomization.yaml": "resources:\n- first.yaml\n- second.yaml\n- third.yaml\n"}); err != nil {
		t.Fatal(err)
	}
	out2, errOut2, code := run(t, args...)
	if code != ExitChanges || !strings.Contains(errOut2, "updated the diff") {
		t.Fatalf("second diff: exit %d\n%s%s", code, out2, errOut2)
	}
	cs = comments()
	if len(cs) != 1 || !strings.Contains(cs[0], "ConfigMap ml/third") {
		t.Fatalf("comments after the second diff: %q", cs)
	}
	for _, text := range []string{out, errOut, out2, errOut2} {
		if strings.Contains(text, g.Token) {
			t.Fatal("the output shows the token")
		}
	}

	// A wrong token: refused, with the forge's answer and not the token.
	t.Setenv(ForgeTokenEnv, "wrong-token-5f3a")
	_, errOut, code = run(t, args...)
	if code != ExitUsage || !strings.Contains(errOut, "401") || strings.Contains(errOut, "wrong-token-5f3a") {
		t.Fatalf("wrong token: exit %d\n%s", code, errOut)
	}
}
