// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/trainops/trainops/gitsource"
)

// Push is what a verified push notification says: the repository (as
// gitsource.RepoKey keys, one per URL the provider gives) and the branch
// or tag pushed.
type Push struct {
	// Repos are the pushed repository's keys; none when the payload names
	// no repository (a bare signed call), which requests the settings'
	// repository only.
	Repos []string
	// Ref is the branch or tag name pushed; "" when not said.
	Ref string
	// Tag: Ref is a tag.
	Tag bool
}

// pushPayload holds the fields of GitHub's and GitLab's push events that
// name the repository and ref.
type pushPayload struct {
	Ref        string `json:"ref"`
	Repository struct {
		CloneURL   string `json:"clone_url"`
		SSHURL     string `json:"ssh_url"`
		GitURL     string `json:"git_url"`
		HTMLURL    string `json:"html_url"`
		URL        string `json:"url"`
		GitHTTPURL string `json:"git_http_url"`
		GitSSHURL  string `json:"git_ssh_url"`
		Homepage   string `json:"homepage"`
	} `json:"repository"`
	Project struct {
		GitHTTPURL string `json:"git_http_url"`
		GitSSHURL  string `json:"git_ssh_url"`
		WebURL     string `json:"web_url"`
	} `json:"project"`
}

// ParsePush reads a verified push payload. What it cannot read leaves the
// Push empty: a push that names nothing.
func ParsePush(body []byte) Push {
	var p pushPayload
	if len(body) == 0 || json.Unmarshal(body, &p) != nil {
		return Push{}
	}
	var out Push
	switch {
	case strings.HasPrefix(p.Ref, "refs/heads/"):
		out.Ref = strings.TrimPrefix(p.Ref, "refs/heads/")
	case strings.HasPrefix(p.Ref, "refs/tags/"):
		out.Ref, out.Tag = strings.TrimPrefix(p.Ref, "refs/tags/"), true
	}
	r := p.Repository
	for _, u := range []string{r.CloneURL, r.SSHURL, r.GitURL, r.HTMLURL, r.URL, r.GitHTTPURL, r.GitSSHURL, r.Homepage,
		p.Project.GitHTTPURL, p.Project.GitSSHURL, p.Project.WebURL} {
		if u == "" {
			continue
		}
		if k := gitsource.RepoKey(u); !slices.Contains(out.Repos, k) {
			out.Repos = append(out.Repos, k)
		}
	}
	return out
}

// Repository is the pushed repository's first key, for logs.
func (p Push) Repository() string {
	if len(p.Repos) == 0 {
		return ""
	}
	return p.Repos[0]
}

// Follows reports whether a sync of repoURL at ref must sync again after
// this push: it follows the pushed repository and the pushed branch or tag
// (a commit follows no push). A push that names no repository matches
// only when anyRepo is set (the settings' own repository, for bare signed
// calls).
func (p Push) Follows(repoURL string, ref gitsource.Ref, anyRepo bool) bool {
	if len(p.Repos) == 0 {
		return anyRepo
	}
	if !slices.Contains(p.Repos, gitsource.RepoKey(repoURL)) || ref.Commit != "" {
		return false
	}
	if p.Ref == "" {
		return true
	}
	switch {
	case ref.Tag != "":
		return p.Tag && ref.Tag == p.Ref
	case p.Tag:
		return false
	}
	// A branch, or gitsource.Ref's default "main".
	return ref.String() == p.Ref
}
