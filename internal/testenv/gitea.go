// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Gitea is a Gitea server on 127.0.0.1 (built by `make testcluster`),
// with SQLite, its API and Git over HTTP, and an admin user.
type Gitea struct {
	// URL is the server's base URL, without a trailing slash.
	URL string
	// User and Password are the admin's; Token is an API token of theirs
	// allowed to write repositories.
	User, Password, Token string
	dir                   string
	proc                  *Process
	bin                   string
}

// GiteaDir is where Gitea was built: $TRAINOPS_GITEA_DIR, else
// bin/gitea/current.
func GiteaDir() (string, error) {
	return builtDir("TRAINOPS_GITEA_DIR", []string{"bin", "gitea", "current"}, []string{"gitea", "templates", "options"}, "Gitea's")
}

// StartGitea starts a Gitea of its own in dir. Its webhooks may reach
// loopback addresses only, and it reaches nothing outside (offline mode).
func StartGitea(ctx context.Context, dir string) (*Gitea, error) {
	built, err := GiteaDir()
	if err != nil {
		return nil, err
	}
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	g := &Gitea{URL: "http://" + addr, User: "trainops-admin", Password: "gitea-admin-" + randomToken(), dir: dir, bin: filepath.Join(built, "gitea")}
	ini := fmt.Sprintf(`APP_NAME = trainops-test
RUN_MODE = prod
WORK_PATH = %[1]s
[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[2]s
ROOT_URL = %[3]s/
DISABLE_SSH = true
START_SSH_SERVER = false
OFFLINE_MODE = true
LFS_START_SERVER = false
STATIC_ROOT_PATH = %[4]s
APP_DATA_PATH = %[1]s/data
[database]
DB_TYPE = sqlite3
PATH = %[1]s/data/gitea.db
[repository]
ROOT = %[1]s/repos
[security]
INSTALL_LOCK = true
SECRET_KEY = %[5]s
[service]
DISABLE_REGISTRATION = true
[webhook]
ALLOWED_HOST_LIST = loopback
DELIVER_TIMEOUT = 10
[log]
MODE = file
LEVEL = Info
ROOT_PATH = %[1]s/log
[mailer]
ENABLED = false
[cron]
ENABLED = false
[indexer]
ISSUE_INDEXER_TYPE = db
[session]
PROVIDER = memory
`, dir, port, g.URL, built, randomToken())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(g.config(), []byte(ini), 0o600); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"migrate"},
		{"admin", "user", "create", "--admin", "--username", g.User, "--password", g.Password, "--email", g.User + "@example.com", "--must-change-password=false"},
	} {
		cmd := exec.CommandContext(ctx, g.bin, append(args, "-c", g.config())...)
		cmd.Env = append(os.Environ(), g.env()...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("gitea %s: %w\n%s", args[0], err, out)
		}
	}
	if err := g.Start(ctx); err != nil {
		return nil, err
	}
	var tok struct {
		SHA1 string `json:"sha1"`
	}
	body := `{"name":"trainops-test","scopes":["write:repository","write:issue","write:user"]}`
	if err := g.call(ctx, http.MethodPost, "/api/v1/users/"+g.User+"/tokens", body, true, &tok); err != nil {
		g.Stop()
		return nil, err
	}
	g.Token = tok.SHA1
	return g, nil
}

func (g *Gitea) config() string { return filepath.Join(g.dir, "app.ini") }

// env lets Gitea run as root, which it refuses by default: the tests run
// as whoever runs them.
func (g *Gitea) env() []string {
	return []string{"GITEA_WORK_DIR=" + g.dir, "GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT=true"}
}

// Start starts the server (again, after Stop) and waits until it answers.
func (g *Gitea) Start(ctx context.Context) error {
	p, err := startProcess(filepath.Join(g.dir, "gitea.log"), g.bin, []string{"web", "-c", g.config()}, g.env())
	if err != nil {
		return err
	}
	g.proc = p
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(g.URL + "/api/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p.Exited() || time.Now().After(deadline) || ctx.Err() != nil {
			p.Kill()
			return fmt.Errorf("gitea did not answer on %s: %v\n%s", g.URL, err, tail(filepath.Join(g.dir, "gitea.log"), 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop stops the server.
func (g *Gitea) Stop() {
	if g.proc != nil {
		g.proc.Stop(10 * time.Second)
		g.proc = nil
	}
}

// CreateRepo makes an empty repository of the admin's; it returns its
// clone URL.
func (g *Gitea) CreateRepo(ctx context.Context, name string) (string, error) {
	var repo struct {
		CloneURL string `json:"clone_url"`
	}
	err := g.call(ctx, http.MethodPost, "/api/v1/user/repos", fmt.Sprintf(`{"name":%q,"default_branch":"main"}`, name), false, &repo)
	return repo.CloneURL, err
}

// AddPushHook makes Gitea call url with every push to repo, signed with
// secret (Gitea's own webhook type).
func (g *Gitea) AddPushHook(ctx context.Context, repo, url, secret string) error {
	body, _ := json.Marshal(map[string]any{"type": "gitea", "active": true, "events": []string{"push"},
		"config": map[string]string{"url": url, "content_type": "json", "secret": secret}})
	return g.call(ctx, http.MethodPost, "/api/v1/repos/"+g.User+"/"+repo+"/hooks", string(body), false, nil)
}

// OpenPull opens a pull request of head into base of repo: its number.
func (g *Gitea) OpenPull(ctx context.Context, repo, head, base string) (int, error) {
	var pr struct {
		Number int `json:"number"`
	}
	err := g.call(ctx, http.MethodPost, "/api/v1/repos/"+g.User+"/"+repo+"/pulls", fmt.Sprintf(`{"head":%q,"base":%q,"title":"change"}`, head, base), false, &pr)
	return pr.Number, err
}

// Comments are the bodies of the comments on issue or pull request
// number of repo, oldest first.
func (g *Gitea) Comments(ctx context.Context, repo string, number int) ([]string, error) {
	var cs []struct {
		Body string `json:"body"`
	}
	if err := g.call(ctx, http.MethodGet, fmt.Sprintf("/api/v1/repos/%s/%s/issues/%d/comments", g.User, repo, number), "", false, &cs); err != nil {
		return nil, err
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Body
	}
	return out, nil
}

// CommitStatus is a commit status as Gitea's API shows it.
type CommitStatus struct {
	State       string `json:"status"`
	Context     string `json:"context"`
	Description string `json:"description"`
}

// Statuses are the commit statuses of sha in repo, newest first.
func (g *Gitea) Statuses(ctx context.Context, repo, sha string) ([]CommitStatus, error) {
	var out []CommitStatus
	err := g.call(ctx, http.MethodGet, "/api/v1/repos/"+g.User+"/"+repo+"/commits/"+sha+"/statuses", "", false, &out)
	return out, err
}

// RepoURL is repo's clone URL.
func (g *Gitea) RepoURL(repo string) string { return g.URL + "/" + g.User + "/" + repo + ".git" }

// Push commits files (path: content; "" removes the path) in work, a
// work tree of repo it makes on first use (its remote origin, with the
// admin's credentials), and pushes main: the commit's SHA.
func (g *Gitea) Push(ctx context.Context, work, repo string, files map[string]string) (string, error) {
	return g.PushBranch(ctx, work, repo, "main", files)
}

// PushBranch is Push to branch (made from the work tree's branch when new).
func (g *Gitea) PushBranch(ctx context.Context, work, repo, branch string, files map[string]string) (string, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", work, "-c", "user.name=trainops-test", "-c", "user.email=test@example.com"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("git %s: %w\n%s", args[0], err, out)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := os.Stat(filepath.Join(work, ".git")); err != nil {
		if err := os.MkdirAll(work, 0o700); err != nil {
			return "", err
		}
		if _, err := git("init", "-q", "-b", "main"); err != nil {
			return "", err
		}
		remote := strings.Replace(g.RepoURL(repo), "http://", "http://"+g.User+":"+g.Password+"@", 1)
		if _, err := git("remote", "add", "origin", remote); err != nil {
			return "", err
		}
	}
	for p, content := range files {
		full := filepath.Join(work, p)
		if content == "" {
			_ = os.Remove(full)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			return "", err
		}
		if err := os.WriteFile(full, []byte(content), 0o600); err != nil {
			return "", err
		}
	}
	if cur, _ := git("symbolic-ref", "--short", "HEAD"); cur != branch {
		if _, err := git("checkout", "-q", "-B", branch); err != nil {
			return "", err
		}
	}
	if _, err := git("add", "-A"); err != nil {
		return "", err
	}
	if _, err := git("commit", "-q", "-m", "change"); err != nil {
		return "", err
	}
	if _, err := git("push", "-q", "-u", "origin", branch); err != nil {
		return "", err
	}
	return git("rev-parse", "HEAD")
}

// call makes an API call as the admin (basic: with the password, else the
// token) and decodes its answer into out.
func (g *Gitea) call(ctx context.Context, method, path, body string, basic bool, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, g.URL+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if basic {
		req.SetBasicAuth(g.User, g.Password)
	} else {
		req.Header.Set("Authorization", "token "+g.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("gitea %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(raw))
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}
