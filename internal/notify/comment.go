// SPDX-License-Identifier: Apache-2.0

package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// CommentMarker opens every comment trainops posts on a pull request: the
// comment it finds again, and updates, on the next push.
const CommentMarker = "<!-- trainops diff -->"

// maxCommentPages bounds the comments of a pull request read to find
// trainops's own (pages of a hundred).
const maxCommentPages = 20

// Comment posts body as trainops's one comment on pull (merge) request
// number of t's repository, updating the comment it posted before if there
// is one. updated says which.
func Comment(ctx context.Context, c *http.Client, t Target, number int, body string) (updated bool, err error) {
	if c == nil {
		c = &http.Client{Timeout: callTimeout}
	}
	body = CommentMarker + "\n" + body
	base := t.commentsURL(number)
	for page := 1; page <= maxCommentPages; page++ {
		var comments []struct {
			ID   int64  `json:"id"`
			Body string `json:"body"`
		}
		if err := t.do(ctx, c, http.MethodGet, base+"?per_page=100&limit=100&page="+strconv.Itoa(page), "", &comments); err != nil {
			return false, err
		}
		for _, cm := range comments {
			if strings.HasPrefix(cm.Body, CommentMarker) {
				method := http.MethodPatch
				if t.Provider == GitLab {
					method = http.MethodPut
				}
				return true, t.do(ctx, c, method, t.commentURL(number, cm.ID), body, nil)
			}
		}
		if len(comments) == 0 {
			break
		}
	}
	return false, t.do(ctx, c, http.MethodPost, base, body, nil)
}

// commentsURL lists and creates the comments of pull request number.
func (t Target) commentsURL(number int) string {
	n := strconv.Itoa(number)
	switch t.Provider {
	case GitLab:
		return t.API + "/api/v4/projects/" + url.PathEscape(t.Repo) + "/merge_requests/" + n + "/notes"
	case Gitea:
		return t.API + "/api/v1/repos/" + t.Repo + "/issues/" + n + "/comments"
	}
	return t.API + "/repos/" + t.Repo + "/issues/" + n + "/comments"
}

// commentURL is comment id of pull request number.
func (t Target) commentURL(number int, id int64) string {
	i := strconv.FormatInt(id, 10)
	switch t.Provider {
	case GitLab:
		return t.commentsURL(number) + "/" + i
	case Gitea:
		return t.API + "/api/v1/repos/" + t.Repo + "/issues/comments/" + i
	}
	return t.API + "/repos/" + t.Repo + "/issues/comments/" + i
}

// do makes one call with t's token; body, when set, is sent as the
// comment's text. Its error never holds the token.
func (t Target) do(ctx context.Context, c *http.Client, method, endpoint, body string, out any) error {
	var rd io.Reader
	if body != "" {
		raw, err := json.Marshal(map[string]string{"body": body})
		if err != nil {
			return err
		}
		rd = strings.NewReader(string(raw))
	}
	req, err := http.NewRequestWithContext(ctx, method, endpoint, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	t.authorize(req)
	resp, err := c.Do(req)
	if err != nil {
		return redact(fmt.Errorf("%s %s: %w", method, t.API, err), t.Token)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode/100 != 2 {
		msg := string(raw)
		if len(msg) > 512 {
			msg = msg[:512]
		}
		return redact(fmt.Errorf("%s %s answered %s: %s", method, t.API, resp.Status, strings.TrimSpace(msg)), t.Token)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// authorize sets t's token as its forge wants it.
func (t Target) authorize(req *http.Request) {
	switch t.Provider {
	case GitHub:
		req.Header.Set("Authorization", "Bearer "+t.Token)
	case GitLab:
		req.Header.Set("PRIVATE-TOKEN", t.Token)
	case Gitea:
		req.Header.Set("Authorization", "token "+t.Token)
	}
}
