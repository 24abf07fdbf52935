// SPDX-License-Identifier: Apache-2.0

// Package gitserver runs a real Git server (HTTP and SSH, on 127.0.0.1) with
// working copies to commit and push to it, for tests, `make demo` and
// `make bench`. It wraps fluxcd's gittestserver, which serves repositories
// with the git binary.
package gitserver

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxcd/gitkit"
	"github.com/fluxcd/pkg/gittestserver"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"golang.org/x/crypto/ssh"
)

// Server is a Git server on 127.0.0.1.
type Server struct {
	*gittestserver.GitServer
	user, password string
	keyDir         string
	down           atomic.Bool

	mu      sync.Mutex
	fetches map[string]int
}

// Fetches is how many fetches and clones the server has answered over
// HTTP for repository repo, as named in URL: each starts with one ref
// advertisement (GET info/refs?service=git-upload-pack), and an
// up-to-date fetch ends there.
func (s *Server) Fetches(repo string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches[repo]
}

// SetDown makes the HTTP server answer 503 to everything (down) or serve
// again, to test what a Git outage does.
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// Start serves Git over HTTP with basic auth (user, password); an empty
// user serves without authentication.
func Start(user, password string) (*Server, error) {
	// gitkit logs every request through the standard logger.
	log.SetOutput(io.Discard)
	gs, err := gittestserver.NewTempGitServer()
	if err != nil {
		return nil, err
	}
	keyDir, err := os.MkdirTemp("", "trainops-git-keys-")
	if err != nil {
		return nil, err
	}
	if user != "" {
		gs.Auth(user, password)
	}
	gs.KeyDir(keyDir)
	s := &Server{GitServer: gs, user: user, password: password, keyDir: keyDir}
	gs.AddHTTPMiddlewares(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s.down.Load() {
				http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
				return
			}
			if repo, ok := strings.CutSuffix(r.URL.Path, "/info/refs"); ok && r.URL.Query().Get("service") == "git-upload-pack" {
				s.mu.Lock()
				if s.fetches == nil {
					s.fetches = map[string]int{}
				}
				s.fetches[strings.TrimPrefix(repo, "/")]++
				s.mu.Unlock()
			}
			next.ServeHTTP(w, r)
		})
	})
	if err := gs.StartHTTP(); err != nil {
		return nil, err
	}
	return s, nil
}

// Stop ends the servers and removes their files.
func (s *Server) Stop() {
	s.StopHTTP()
	_ = s.StopSSH()
	_ = os.RemoveAll(s.Root())
	_ = os.RemoveAll(s.keyDir)
}

// StartSSH also serves over SSH, accepting only clientKey, and returns the
// known_hosts line of the server's host key.
func (s *Server) StartSSH(clientKey ssh.PublicKey) (string, error) {
	want := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(clientKey)))
	s.PublicKeyLookupFunc(func(content string) (*gitkit.PublicKey, error) {
		if strings.TrimSpace(content) != want {
			return nil, fmt.Errorf("unknown key")
		}
		return &gitkit.PublicKey{Id: "test-user"}, nil
	})
	// gitkit reads its host key from <keyDir>/gitkit.rsa (any key type).
	hostKey, hostPub, err := NewSSHKey()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(s.keyDir, "gitkit.rsa"), hostKey, 0o600); err != nil {
		return "", err
	}
	if err := s.ListenSSH(); err != nil {
		return "", err
	}
	go func() { _ = s.GitServer.StartSSH() }()
	u, err := url.Parse(s.SSHAddress())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("[%s]:%s %s", u.Hostname(), u.Port(), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostPub)))), nil
}

// NewSSHKey makes an ed25519 client key: PEM private key and public key.
func NewSSHKey() ([]byte, ssh.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, nil, err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(block), sshPub, nil
}

// URL is the HTTP address of a repository, without credentials.
func (s *Server) URL(repo string) string { return s.HTTPAddress() + "/" + repo }

// SSHURL is the SSH address of a repository.
func (s *Server) SSHURL(repo string) string { return s.SSHAddress() + "/" + repo }

// Repo is a working copy that pushes to a repository on the server.
type Repo struct {
	Dir    string
	repo   *git.Repository
	auth   *githttp.BasicAuth
	branch string
}

// NewRepo creates repository name on the server with the files of fixture
// (a folder; may be empty) on branch, and returns a working copy of it.
func (s *Server) NewRepo(name, branch, fixture string) (*Repo, error) {
	if fixture == "" {
		d, err := os.MkdirTemp("", "trainops-fixture-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		if err := os.WriteFile(filepath.Join(d, "README.md"), []byte("# training config\n"), 0o644); err != nil {
			return nil, err
		}
		fixture = d
	}
	if err := s.InitRepo(fixture, branch, name); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "trainops-worktree-")
	if err != nil {
		return nil, err
	}
	var auth *githttp.BasicAuth
	if s.user != "" {
		auth = &githttp.BasicAuth{Username: s.user, Password: s.password}
	}
	r, err := git.PlainClone(dir, false, &git.CloneOptions{URL: s.URL(name), Auth: authMethod(auth), ReferenceName: plumbing.NewBranchReferenceName(branch)})
	if err != nil {
		return nil, fmt.Errorf("clone %s: %w", name, err)
	}
	return &Repo{Dir: dir, repo: r, auth: auth, branch: branch}, nil
}

// Write puts content at path (relative to the work tree).
func (r *Repo) Write(path, content string) error {
	p := filepath.Join(r.Dir, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), 0o644)
}

// Remove deletes path from the work tree.
func (r *Repo) Remove(path string) error { return os.RemoveAll(filepath.Join(r.Dir, path)) }

// MustWrite is Write that fails the test t when it fails.
func (r *Repo) MustWrite(t testing.TB, path, content string) {
	t.Helper()
	if err := r.Write(path, content); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

// MustRemove is Remove that fails the test t when it fails.
func (r *Repo) MustRemove(t testing.TB, path string) {
	t.Helper()
	if err := r.Remove(path); err != nil {
		t.Fatalf("remove %s: %v", path, err)
	}
}

// CommitAndPush commits every change and pushes; it returns the commit.
// A commit that changes nothing is an error (git.ErrEmptyCommit): a test
// whose writes did not land fails here, not later by passing for nothing.
func (r *Repo) CommitAndPush(msg string) (string, error) {
	return r.commit(msg, false, false)
}

// CommitEmptyAndPush pushes a commit that changes nothing, for a test
// that wants a new revision of the same tree.
func (r *Repo) CommitEmptyAndPush(msg string) (string, error) {
	return r.commit(msg, false, true)
}

// AmendAndForcePush replaces the last commit and force-pushes, rewriting
// the branch's history.
func (r *Repo) AmendAndForcePush(msg string) (string, error) {
	return r.commit(msg, true, true)
}

func (r *Repo) commit(msg string, amend, allowEmpty bool) (string, error) {
	wt, err := r.repo.Worktree()
	if err != nil {
		return "", err
	}
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		return "", err
	}
	sig := &object.Signature{Name: "trainops test", Email: "test@trainops.dev", When: time.Now()}
	h, err := wt.Commit(msg, &git.CommitOptions{Author: sig, AllowEmptyCommits: allowEmpty, Amend: amend})
	if err != nil {
		return "", err
	}
	ref := "refs/heads/" + r.branch
	spec := config.RefSpec(ref + ":" + ref)
	if amend {
		spec = config.RefSpec("+" + ref + ":" + ref)
	}
	if err := r.repo.Push(&git.PushOptions{Auth: authMethod(r.auth), RefSpecs: []config.RefSpec{spec}, Force: amend}); err != nil && err != git.NoErrAlreadyUpToDate {
		return "", fmt.Errorf("push: %w", err)
	}
	return h.String(), nil
}

// Tag tags the current commit and pushes the tag.
func (r *Repo) Tag(name string) error {
	head, err := r.repo.Head()
	if err != nil {
		return err
	}
	if _, err := r.repo.CreateTag(name, head.Hash(), nil); err != nil {
		return err
	}
	spec := config.RefSpec("refs/tags/" + name + ":refs/tags/" + name)
	return r.repo.Push(&git.PushOptions{Auth: authMethod(r.auth), RefSpecs: []config.RefSpec{spec}})
}

// authMethod avoids a typed nil interface when there are no credentials.
func authMethod(a *githttp.BasicAuth) transport.AuthMethod {
	if a == nil {
		return nil
	}
	return a
}

// RepoDir is the bare repository of name on the server, e.g. to install
// hooks in.
func (s *Server) RepoDir(name string) string { return filepath.Join(s.Root(), name) }

// Close removes the working copy.
func (r *Repo) Close() { _ = os.RemoveAll(r.Dir) }
