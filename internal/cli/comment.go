// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/trainops/trainops/internal/diff"
	"github.com/trainops/trainops/internal/notify"
)

// ForgeTokenEnv holds the token `diff --comment-pr` posts with.
const ForgeTokenEnv = "TRAINOPS_FORGE_TOKEN"

// commentFlags say where `diff` posts its report as a pull-request comment.
type commentFlags struct {
	pr                     int
	provider, repo, apiURL string
}

func (c *commentFlags) bind(cmd *cobra.Command) {
	cmd.Flags().IntVar(&c.pr, "comment-pr", 0, "also post the markdown report as one comment on this pull (merge) request, updated in place on later runs (token: $"+ForgeTokenEnv+")")
	cmd.Flags().StringVar(&c.provider, "comment-provider", "", "the forge of --comment-pr: "+strings.Join(notify.Providers, ", "))
	cmd.Flags().StringVar(&c.repo, "comment-repo", "", "the repository's URL on the forge (https://github.com/org/repo, git@host:org/repo.git)")
	cmd.Flags().StringVar(&c.apiURL, "comment-api-url", "", "the forge's API address (default: from --comment-repo; https://api.github.com for github.com)")
}

// post posts report as the pull request's comment, when asked to.
func (c *commentFlags) post(ctx context.Context, log io.Writer, report *diff.Report) error {
	if c.pr == 0 {
		return nil
	}
	token := strings.TrimSpace(os.Getenv(ForgeTokenEnv))
	switch {
	case c.pr < 0:
		return fmt.Errorf("--comment-pr %d: a pull request's number is positive", c.pr)
	case c.provider == "" || c.repo == "":
		return errors.New("--comment-pr needs --comment-provider and --comment-repo")
	case token == "":
		return fmt.Errorf("--comment-pr: $%s is empty: it holds the token that may comment", ForgeTokenEnv)
	}
	t, err := notify.TargetFor(c.provider, c.apiURL, c.repo, "", token)
	if err != nil {
		return fmt.Errorf("--comment-pr: %w", err)
	}
	var md bytes.Buffer
	if err := report.WriteMarkdown(&md); err != nil {
		return err
	}
	updated, err := notify.Comment(ctx, nil, t, c.pr, md.String())
	if err != nil {
		return fmt.Errorf("--comment-pr: %w", err)
	}
	verb := "posted"
	if updated {
		verb = "updated"
	}
	_, _ = fmt.Fprintf(log, "%s the diff as the comment of %s#%d\n", verb, t.Repo, c.pr)
	return nil
}
