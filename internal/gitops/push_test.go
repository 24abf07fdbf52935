// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/signature"
)

// Payloads cut down from GitHub's and GitLab's documented push events.
const (
	githubPush = `{"ref":"refs/heads/main","before":"0","after":"1",
 "repository":{"name":"training-config","full_name":"ml/training-config","html_url":"https://github.com/ml/training-config",
  "url":"https://github.com/ml/training-config","git_url":"git://github.com/ml/training-config.git",
  "ssh_url":"git@github.com:ml/training-config.git","clone_url":"https://github.com/ml/training-config.git","default_branch":"main"},
 "pusher":{"name":"a"},"commits":[]}`
	gitlabTagPush = `{"object_kind":"tag_push","ref":"refs/tags/v1.2.0",
 "project":{"web_url":"https://gitlab.example.com/ml/training-config","git_ssh_url":"git@gitlab.example.com:ml/training-config.git",
  "git_http_url":"https://gitlab.example.com/ml/training-config.git","default_branch":"main"},
 "repository":{"name":"training-config","url":"git@gitlab.example.com:ml/training-config.git",
  "git_http_url":"https://gitlab.example.com/ml/training-config.git","git_ssh_url":"git@gitlab.example.com:ml/training-config.git"}}`
)

func TestPushFollows(t *testing.T) {
	gh, gl := ParsePush([]byte(githubPush)), ParsePush([]byte(gitlabTagPush))
	if gh.Ref != "main" || gh.Tag || gh.Repository() != "github.com/ml/training-config" {
		t.Fatalf("GitHub push read as %+v", gh)
	}
	if gl.Ref != "v1.2.0" || !gl.Tag || gl.Repository() != "gitlab.example.com/ml/training-config" {
		t.Fatalf("GitLab tag push read as %+v", gl)
	}
	tests := []struct {
		name string
		push Push
		url  string
		ref  gitsource.Ref
		any  bool
		want bool
	}{
		{"same repository over https, branch main", gh, "https://github.com/ml/training-config.git", gitsource.Ref{Branch: "main"}, false, true},
		{"same repository over ssh", gh, "ssh://git@github.com/ml/training-config", gitsource.Ref{Branch: "main"}, false, true},
		{"no branch means main", gh, "https://github.com/ml/training-config", gitsource.Ref{}, false, true},
		{"another branch", gh, "https://github.com/ml/training-config", gitsource.Ref{Branch: "dev"}, false, false},
		{"another repository", gh, "https://github.com/ml/other-config", gitsource.Ref{Branch: "main"}, false, false},
		{"a repository of the same name elsewhere", gh, "https://gitlab.example.com/ml/training-config", gitsource.Ref{Branch: "main"}, false, false},
		{"a commit follows no push", gh, "https://github.com/ml/training-config", gitsource.Ref{Commit: strings.Repeat("a", 40)}, false, false},
		{"a tag follows its tag's push", gl, "https://gitlab.example.com/ml/training-config.git", gitsource.Ref{Tag: "v1.2.0"}, false, true},
		{"a tag does not follow another", gl, "https://gitlab.example.com/ml/training-config.git", gitsource.Ref{Tag: "v1.1.0"}, false, false},
		{"a branch does not follow a tag", gl, "https://gitlab.example.com/ml/training-config.git", gitsource.Ref{Branch: "v1.2.0"}, false, false},
		{"a bare call names no GitSync's repository", Push{}, "https://github.com/ml/training-config", gitsource.Ref{}, false, false},
		{"a bare call asks for the settings' repository", Push{}, "https://github.com/ml/training-config", gitsource.Ref{}, true, true},
		{"a bare call with a ref asks for the settings' repository", ParsePush([]byte(`{"ref":"refs/heads/main"}`)), "https://x/y", gitsource.Ref{}, true, true},
		{"a push naming another repository is not the settings'", gh, "https://github.com/ml/other", gitsource.Ref{}, true, false},
	}
	for _, tc := range tests {
		if got := tc.push.Follows(tc.url, tc.ref, tc.any); got != tc.want {
			t.Errorf("%s: Follows = %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, junk := range []string{"", "not json", `{"ref":7}`, `[]`} {
		if p := ParsePush([]byte(junk)); len(p.Repos) != 0 || p.Ref != "" {
			t.Errorf("ParsePush(%q) = %+v, want an empty push", junk, p)
		}
	}
}

// TestWebhookPassesTheVerifiedPush: the push a sync is asked for is the
// verified body's; a body whose signature does not match is never parsed
// into a request.
func TestWebhookPassesTheVerifiedPush(t *testing.T) {
	secret := []byte("webhook-shared-secret")
	var got []Push
	w := &Webhook{Secret: secret, Log: logr.Discard(), Request: func(_ context.Context, p Push) error { got = append(got, p); return nil }}
	send := func(body, sig string) int {
		req := httptest.NewRequest("POST", "/hook", strings.NewReader(body))
		req.Header.Set(HeaderGitHubSignature, sig)
		req.Header.Set(HeaderGitHubEvent, "push")
		rec := httptest.NewRecorder()
		w.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := send(githubPush, signature.Sign(secret, []byte(githubPush))); code != 202 {
		t.Fatalf("signed push answered %d", code)
	}
	// The same signature over a body naming another repository.
	forged := strings.ReplaceAll(githubPush, "training-config", "victim-config")
	if code := send(forged, signature.Sign(secret, []byte(githubPush))); code != 401 {
		t.Fatalf("forged push answered %d", code)
	}
	if len(got) != 1 || got[0].Repository() != "github.com/ml/training-config" || got[0].Ref != "main" {
		t.Fatalf("requests %+v, want one for github.com/ml/training-config main", got)
	}
}
