// SPDX-License-Identifier: Apache-2.0

// Package notify tells the forge that hosts a repository what became of
// each revision, as a commit status on the commit (GitHub, GitLab and
// Gitea APIs). Statuses are posted in the background with retries and
// back-off: a sync never waits for a forge. The forge's token never
// appears in a log line, an error or a metric.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// Forges whose commit-status API trainops speaks.
const (
	GitHub = "github"
	GitLab = "gitlab"
	Gitea  = "gitea"
)

// Providers are the forges trainops posts commit statuses to.
var Providers = []string{GitHub, GitLab, Gitea}

// State is a commit status's outcome.
type State string

// The states trainops posts; each forge's word for them is its own.
const (
	Pending State = "pending"
	Success State = "success"
	Failure State = "failure"
)

// maxDescription bounds a status's description (GitHub's limit).
const maxDescription = 140

// Target is where one repository's commit statuses go.
type Target struct {
	Provider string
	// API is the forge's address: https://api.github.com, or a GitLab's
	// or Gitea's base URL.
	API string
	// Repo is the repository's path on the forge: owner/name, or a
	// GitLab project's full path.
	Repo string
	// Context names the status among a commit's others
	// (trainops/<namespace>/<name>).
	Context string
	// Token authenticates the calls.
	Token string
}

// TargetFor is the target of the repository at repoURL on provider's forge.
// api, when empty, is derived from repoURL: the same scheme and host (for
// github.com, api.github.com; for another GitHub host, its /api/v3).
func TargetFor(provider, api, repoURL, statusContext, token string) (Target, error) {
	t := Target{Provider: provider, Context: statusContext, Token: token}
	switch provider {
	case GitHub, GitLab, Gitea:
	default:
		return t, fmt.Errorf("provider %q is not one of %s", provider, strings.Join(Providers, ", "))
	}
	host, path, scheme, err := splitRepoURL(repoURL)
	if err != nil {
		return t, err
	}
	t.Repo = path
	if strings.Count(path, "/") < 1 || (provider != GitLab && strings.Count(path, "/") != 1) {
		return t, fmt.Errorf("repository %q is not owner/name on %s", path, provider)
	}
	switch {
	case api != "":
		u, err := url.Parse(api)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			return t, fmt.Errorf("apiURL %q is not an http(s) URL without credentials", api)
		}
		t.API = strings.TrimSuffix(api, "/")
	case provider == GitHub && host == "github.com":
		t.API = "https://api.github.com"
	case provider == GitHub:
		t.API = scheme + "://" + host + "/api/v3"
	default:
		t.API = scheme + "://" + host
	}
	return t, nil
}

// ErrNoToken says a Secret has no key token.
var ErrNoToken = errors.New("the Secret has no key token")

// TargetFromSecret is TargetFor with the token of a Secret's key token.
func TargetFromSecret(provider, api, repoURL, statusContext string, data map[string][]byte) (Target, error) {
	token := strings.TrimSpace(string(data["token"]))
	if token == "" {
		return Target{}, ErrNoToken
	}
	return TargetFor(provider, api, repoURL, statusContext, token)
}

// scpLike is git@host:path.
var scpLike = regexp.MustCompile(`^[^@/:]+@([^:/]+):(.+)$`)

// splitRepoURL is the host, path (without .git) and web scheme of a
// repository URL; ssh URLs are served over https.
func splitRepoURL(repoURL string) (host, path, scheme string, err error) {
	if m := scpLike.FindStringSubmatch(repoURL); m != nil {
		return m[1], strings.Trim(strings.TrimSuffix(m[2], ".git"), "/"), "https", nil
	}
	u, err := url.Parse(repoURL)
	if err != nil || u.Host == "" {
		return "", "", "", fmt.Errorf("repository URL %q has no host", repoURL)
	}
	scheme = u.Scheme
	if scheme != "http" {
		scheme = "https"
	}
	return u.Hostname() + portOf(u), strings.Trim(strings.TrimSuffix(u.Path, ".git"), "/"), scheme, nil
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" && u.Scheme != "ssh" {
		return ":" + p
	}
	return ""
}

// Status is what became of one commit.
type Status struct {
	// Commit is the full SHA.
	Commit      string
	State       State
	Description string
}

// Commit is the SHA of a revision as trainops writes it
// ("main@sha1:<sha>"), or "" when it names none.
func Commit(revision string) string {
	_, sha, ok := strings.Cut(revision, "sha1:")
	if !ok || len(sha) != 40 {
		return ""
	}
	return sha
}

// Request is the forge's API call that sets st on t's commit.
func (t Target) Request(ctx context.Context, st Status) (*http.Request, error) {
	desc := st.Description
	if r := []rune(desc); len(r) > maxDescription {
		desc = string(r[:maxDescription-1]) + "…"
	}
	var endpoint string
	var body any
	switch t.Provider {
	case GitHub, Gitea:
		prefix := "/repos/"
		if t.Provider == Gitea {
			prefix = "/api/v1/repos/"
		}
		endpoint = t.API + prefix + t.Repo + "/statuses/" + url.PathEscape(st.Commit)
		body = map[string]string{"state": string(st.State), "context": t.Context, "description": desc}
	case GitLab:
		state := string(st.State)
		if st.State == Failure {
			state = "failed"
		}
		endpoint = t.API + "/api/v4/projects/" + url.PathEscape(t.Repo) + "/statuses/" + url.PathEscape(st.Commit)
		body = map[string]string{"state": state, "name": t.Context, "description": desc}
	default:
		return nil, fmt.Errorf("provider %q is not one of %s", t.Provider, strings.Join(Providers, ", "))
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	t.authorize(req)
	return req, nil
}
