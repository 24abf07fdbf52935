// SPDX-License-Identifier: Apache-2.0

package notify

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestTargetFor(t *testing.T) {
	for _, tc := range []struct {
		provider, api, repo string
		wantAPI, wantRepo   string
		err                 string
	}{
		{GitHub, "", "https://github.com/ml/training-config.git", "https://api.github.com", "ml/training-config", ""},
		{GitHub, "", "git@github.com:ml/training-config.git", "https://api.github.com", "ml/training-config", ""},
		{GitHub, "", "https://ghe.example.com/ml/cfg", "https://ghe.example.com/api/v3", "ml/cfg", ""},
		{GitLab, "", "ssh://git@gitlab.example.com/group/sub/cfg.git", "https://gitlab.example.com", "group/sub/cfg", ""},
		{Gitea, "", "http://127.0.0.1:3000/ml/cfg.git", "http://127.0.0.1:3000", "ml/cfg", ""},
		{Gitea, "https://gitea.example.com/", "ssh://git@gitea.example.com:2222/ml/cfg.git", "https://gitea.example.com", "ml/cfg", ""},
		{Gitea, "", "https://gitea.example.com/a/b/c", "", "", "not owner/name"},
		{"bitbucket", "", "https://bitbucket.org/a/b", "", "", "not one of github, gitlab, gitea"},
		{Gitea, "https://user:pw@gitea.example.com", "https://gitea.example.com/a/b", "", "", "without credentials"},
		{Gitea, "file:///etc", "https://gitea.example.com/a/b", "", "", "http(s) URL"},
	} {
		got, err := TargetFor(tc.provider, tc.api, tc.repo, "trainops/ns/name", "tok")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %s: error %v, want %q", tc.provider, tc.repo, err, tc.err)
			}
			continue
		}
		if err != nil || got.API != tc.wantAPI || got.Repo != tc.wantRepo {
			t.Errorf("%s %s: %+v %v, want API %s repo %s", tc.provider, tc.repo, got, err, tc.wantAPI, tc.wantRepo)
		}
	}
}

func TestCommit(t *testing.T) {
	sha := strings.Repeat("ab", 20)
	for rev, want := range map[string]string{"main@sha1:" + sha: sha, "sha1:" + sha: sha, "main@sha1:abc": "", "": ""} {
		if got := Commit(rev); got != want {
			t.Errorf("Commit(%q) = %q, want %q", rev, got, want)
		}
	}
}

func TestRequestsPerForge(t *testing.T) {
	sha := strings.Repeat("0f", 20)
	long := strings.Repeat("é", 200)
	for _, tc := range []struct {
		provider, url, auth, authValue, state, contextKey string
	}{
		{GitHub, "https://api.github.com/repos/ml/cfg/statuses/" + sha, "Authorization", "Bearer tok", "failure", "context"},
		{Gitea, "https://gitea.example.com/api/v1/repos/ml/cfg/statuses/" + sha, "Authorization", "token tok", "failure", "context"},
		{GitLab, "https://gitlab.example.com/api/v4/projects/ml%2Fcfg/statuses/" + sha, "PRIVATE-TOKEN", "tok", "failed", "name"},
	} {
		api := map[string]string{GitHub: "", Gitea: "https://gitea.example.com", GitLab: "https://gitlab.example.com"}[tc.provider]
		tg, err := TargetFor(tc.provider, api, "https://github.com/ml/cfg", "trainops/team/cfg", "tok")
		if err != nil {
			t.Fatal(err)
		}
		req, err := tg.Request(context.Background(), Status{Commit: sha, State: Failure, Description: long})
		if err != nil {
			t.Fatal(err)
		}
		if req.Method != "POST" || req.URL.String() != tc.url || req.Header.Get(tc.auth) != tc.authValue {
			t.Errorf("%s: %s %s %s=%q", tc.provider, req.Method, req.URL, tc.auth, req.Header.Get(tc.auth))
		}
		raw, _ := io.ReadAll(req.Body)
		body := map[string]string{}
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatal(err)
		}
		if body["state"] != tc.state || body[tc.contextKey] != "trainops/team/cfg" || len([]rune(body["description"])) != maxDescription {
			t.Errorf("%s: body %v", tc.provider, body)
		}
	}
}

// TestSecretsNameTheirKeys: a commit-status Secret without token and an
// alert Secret without address are refused, saying which key is missing.
func TestSecretsNameTheirKeys(t *testing.T) {
	if _, err := TargetFromSecret(Gitea, "", "https://git.example/ml/cfg", "c", map[string][]byte{"tokn": []byte("x")}); !errors.Is(err, ErrNoToken) {
		t.Errorf("no token: %v", err)
	}
	if tg, err := TargetFromSecret(Gitea, "", "https://git.example/ml/cfg", "c", map[string][]byte{"token": []byte(" t \n")}); err != nil || tg.Token != "t" {
		t.Errorf("token: %+v %v", tg, err)
	}
	if _, err := ChannelFromSecret(Slack, map[string][]byte{"url": []byte("https://hooks.example/x")}); err == nil || !strings.Contains(err.Error(), "key address") {
		t.Errorf("no address: %v", err)
	}
}
