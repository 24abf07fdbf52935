// SPDX-License-Identifier: Apache-2.0

// Package gitsource fetches a Git repository at a branch, tag or commit into
// a local cache with go-git, and reports the revision it got as
// "<ref>@sha1:<hash>". Credentials (HTTPS basic or token, SSH key) are held
// in memory only and never appear in errors; SSH host keys are verified
// against known_hosts unless verification is explicitly switched off.
package gitsource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/filesystem"
	gossh "golang.org/x/crypto/ssh"

	"github.com/trainops/trainops/internal/limits"
)

// Ref is what to check out: exactly one of Branch, Tag or Commit. An empty
// Ref means the branch "main".
type Ref struct {
	Branch string
	Tag    string
	Commit string
}

// String names the ref as revisions show it.
func (r Ref) String() string {
	switch {
	case r.Tag != "":
		return r.Tag
	case r.Commit != "":
		return r.Commit
	case r.Branch != "":
		return r.Branch
	}
	return "main"
}

// Auth holds credentials. They are never logged or put in errors.
type Auth struct {
	// Username and Password authenticate over HTTPS (a token goes in
	// Password; Username may then be anything, e.g. "git").
	Username string
	Password string
	// SSHPrivateKey is a PEM private key for ssh:// URLs, optionally
	// encrypted with SSHPassphrase.
	SSHPrivateKey []byte
	SSHPassphrase string
	// KnownHosts verifies the SSH server's host key (known_hosts format).
	KnownHosts []byte
	// InsecureSkipHostKeyVerification accepts any SSH host key. It exposes
	// the credentials and the repository to whoever answers: only for
	// testing.
	InsecureSkipHostKeyVerification bool
}

// AuthFromSecret reads credentials from a Secret's data: username and
// password (a token) for HTTPS; identity (an SSH private key),
// identity.passphrase and known_hosts for SSH.
func AuthFromSecret(data map[string][]byte) Auth {
	return Auth{
		Username:      string(data["username"]),
		Password:      string(data["password"]),
		SSHPrivateKey: data["identity"],
		SSHPassphrase: string(data["identity.passphrase"]),
		KnownHosts:    data["known_hosts"],
	}
}

// Options configure a Source.
type Options struct {
	// URL of the repository: https://, http:// or ssh://.
	URL  string
	Ref  Ref
	Auth Auth
	// CacheDir holds the clones; one folder per URL.
	CacheDir string
	// TreeDir is where a revision's files are written for rendering; only
	// the latest revision's are kept. By default it is a folder in
	// memory-backed /dev/shm when there is one, as a revision is thousands
	// of small files written and read once (see docs/design.md), else
	// in CacheDir. A full /dev/shm falls back to CacheDir.
	TreeDir string
	// Timeout bounds one fetch (default 60s).
	Timeout time.Duration
	// MaxBytes bounds the size of a revision's files added up (default
	// 64 MiB); each file is bounded by limits.FileBytes (8 MiB). Sizes are
	// read from the Git objects' headers, before any content.
	MaxBytes int64
}

// Checkout is a fetched revision on disk.
type Checkout struct {
	// Dir is the work tree.
	Dir string
	// Revision is "<ref>@sha1:<hash>".
	Revision string
	// Commit is the full commit hash.
	Commit string
}

// Source fetches one repository ref.
type Source struct {
	opts  Options
	dir   string
	trees string
	// inMemory: trees is the folder New chose in /dev/shm, which Close
	// removes.
	inMemory bool
	// claimed: the in-memory folder was checked and marked as this cache's.
	claimed bool
	// last is the revision whose files tree last wrote, which the next
	// revision's are made from (zero: none known).
	last extracted
	auth transport.AuthMethod
}

// New checks the options and prepares the credentials.
func New(opts Options) (*Source, error) {
	opts.URL = scpToSSH(opts.URL)
	u, err := url.Parse(opts.URL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("repository URL %q is not a URL such as https://host/org/repo.git or ssh://git@host/org/repo.git", Redact(opts.URL))
	}
	set := 0
	for _, s := range []string{opts.Ref.Branch, opts.Ref.Tag, opts.Ref.Commit} {
		if s != "" {
			set++
		}
	}
	if set > 1 {
		return nil, errors.New("set only one of branch, tag or commit")
	}
	if opts.Ref.Commit != "" && !plumbing.IsHash(opts.Ref.Commit) {
		return nil, fmt.Errorf("commit %q is not a full 40-character SHA-1", opts.Ref.Commit)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 60 * time.Second
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = limits.RevisionBytes
	}
	if opts.CacheDir == "" {
		return nil, errors.New("a cache folder is required")
	}
	folder, err := cloneFolder(opts.CacheDir, opts.URL, opts.Ref)
	if err != nil {
		return nil, err
	}
	s := &Source{opts: opts, dir: filepath.Join(opts.CacheDir, folder)}
	s.trees = opts.TreeDir
	if s.trees == "" {
		s.trees = filepath.Join(s.dir, "trees")
		if shm := ScratchDir(); shm != "" {
			// One folder per clone, so processes with their own caches do
			// not share trees.
			abs, _ := filepath.Abs(s.dir)
			tsum := sha256.Sum256([]byte(abs))
			s.trees = filepath.Join(shm, treesPrefix+hex.EncodeToString(tsum[:8]))
			s.inMemory = true
			sweepOrphanTrees(shm)
		}
	}
	switch u.Scheme {
	case "http", "https":
		if u.User != nil {
			return nil, fmt.Errorf("repository URL %s carries credentials: put them in the auth settings instead", Redact(opts.URL))
		}
		if opts.Auth.Username != "" || opts.Auth.Password != "" {
			user := opts.Auth.Username
			if user == "" {
				user = "git"
			}
			s.auth = &githttp.BasicAuth{Username: user, Password: opts.Auth.Password}
		}
	case "ssh":
		user := "git"
		if u.User != nil && u.User.Username() != "" {
			user = u.User.Username()
		}
		if len(opts.Auth.SSHPrivateKey) == 0 {
			return nil, errors.New("an ssh:// repository needs an SSH private key")
		}
		keys, err := gitssh.NewPublicKeys(user, opts.Auth.SSHPrivateKey, opts.Auth.SSHPassphrase)
		if err != nil {
			return nil, fmt.Errorf("SSH private key: %w", sanitize(err, opts.Auth))
		}
		switch {
		case opts.Auth.InsecureSkipHostKeyVerification:
			keys.HostKeyCallback = gossh.InsecureIgnoreHostKey() //nolint:gosec // asked for by name
		case len(opts.Auth.KnownHosts) == 0:
			return nil, errors.New("an ssh:// repository needs known_hosts to verify the server (or the explicit insecure option to skip it)")
		default:
			cb, err := knownHostsCallback(opts.Auth.KnownHosts)
			if err != nil {
				return nil, err
			}
			keys.HostKeyCallback = cb
		}
		s.auth = keys
	default:
		return nil, fmt.Errorf("repository URL %s: scheme %q is not supported (use https, http or ssh)", Redact(opts.URL), u.Scheme)
	}
	return s, nil
}

// Fetch brings the cache up to date with the remote ref and returns its
// files. A history rewritten by a force-push is followed to the new head.
//
// The cache is a bare clone plus one extracted tree per revision: writing
// a tree's files once is much faster than go-git's work-tree checkout, and
// an unchanged revision costs no file writes at all. A new revision is
// fetched as what it adds to the cached one (see update), in a pack of its
// own; past maxPacks the cache is cloned afresh.
func (s *Source) Fetch(ctx context.Context) (*Checkout, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	bare := filepath.Join(s.dir, "repo.git")
	co, err := s.fetchCached(ctx, bare)
	if err == nil || !retryWithClone(err) {
		return co, err
	}
	// No usable cache: clone afresh.
	_ = os.RemoveAll(s.dir)
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	st := bareStorage(bare, s.opts.MaxBytes)
	defer st.Close()
	repo, err := s.clone(ctx, st)
	if err == nil {
		err = writeCloneConfig(bare, s.opts.URL)
	}
	if err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, s.classify("clone", err)
	}
	h, err := s.resolve(repo)
	if err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, s.classify("clone", err)
	}
	return s.checkoutOf(repo, h)
}

// fetchCached fetches into the bare clone in bare and writes the revision's
// files. An error retryWithClone accepts says the cache cannot serve it:
// absent or unreadable, its configuration not the one trainops wrote (the
// clone is never trusted to say where to fetch from), past maxPacks, or
// without an object the revision needs (a fetch without a depth takes the
// cache to hold the history behind its commit, which a clone of depth 1
// does not).
func (s *Source) fetchCached(ctx context.Context, bare string) (*Checkout, error) {
	if !checkCloneConfig(bare, s.opts.URL) {
		return nil, fmt.Errorf("%w: configuration changed or absent", errStaleCache)
	}
	repo, st, err := openBare(bare, s.opts.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errStaleCache, err)
	}
	defer st.Close()
	if packCount(bare) > maxPacks {
		return nil, errTooManyPacks
	}
	h, err := s.update(ctx, repo)
	if err != nil {
		if retryWithClone(err) {
			return nil, err
		}
		return nil, s.classify("fetch", err)
	}
	return s.checkoutOf(repo, h)
}

// checkoutOf writes the files of commit h (see tree) and describes them.
func (s *Source) checkoutOf(repo *git.Repository, h plumbing.Hash) (*Checkout, error) {
	dir, err := s.tree(repo, h)
	if err != nil {
		return nil, err
	}
	co := s.checkout(h)
	co.Dir = dir
	return co, nil
}

// treesPrefix names the folders of revision files in memory; each holds
// ownerFile, the cache folder of the Source that made it.
const (
	treesPrefix = "trainops-trees-"
	ownerFile   = ".cache-dir"
)

// sweepOrphanTrees removes folders of revision files whose cache folder is
// gone: left by a process that was killed, for a cache that no longer
// exists (a test's temporary folder, say). A live cache's folder is reused
// by the next process with that cache, so it is left alone.
func sweepOrphanTrees(shm string) {
	entries, _ := os.ReadDir(shm)
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), treesPrefix) {
			continue
		}
		dir := filepath.Join(shm, e.Name())
		if !privateDir(dir) {
			continue // another user's
		}
		owner, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			// Being made right now, or not ours: leave it unless old.
			if info, serr := e.Info(); serr == nil && time.Since(info.ModTime()) > time.Hour {
				_ = os.RemoveAll(dir)
			}
			continue
		}
		if _, err := os.Stat(string(owner)); errors.Is(err, fs.ErrNotExist) {
			_ = os.RemoveAll(dir)
		}
	}
}

// tree returns the extracted files of commit h, extracting them once, and
// removes the trees of older revisions.
func (s *Source) tree(repo *git.Repository, h plumbing.Hash) (string, error) {
	if s.inMemory && !s.claimed {
		// /dev/shm is shared by every user of the machine: write only to a
		// folder this user made and alone may enter, else to the cache.
		_ = os.Mkdir(s.trees, 0o700)
		abs, _ := filepath.Abs(s.dir)
		if !privateDir(s.trees) || os.WriteFile(filepath.Join(s.trees, ownerFile), []byte(abs), 0o600) != nil {
			s.trees, s.inMemory = filepath.Join(s.dir, "trees"), false
		}
		s.claimed = true
	}
	dir := filepath.Join(s.trees, h.String())
	if _, err := os.Stat(dir); err != nil {
		err := s.writeTree(repo, h, dir)
		if errors.Is(err, syscall.ENOSPC) && s.inMemory {
			// Memory is full: use the cache folder from now on.
			_ = os.RemoveAll(s.trees)
			s.trees, s.inMemory = filepath.Join(s.dir, "trees"), false
			return s.tree(repo, h)
		}
		if err != nil {
			return "", err
		}
	}
	entries, _ := os.ReadDir(s.trees)
	for _, e := range entries {
		if e.Name() != h.String() && e.Name() != ownerFile {
			_ = os.RemoveAll(filepath.Join(s.trees, e.Name()))
		}
	}
	return dir, nil
}

// Close frees the memory the extracted files take; the clone stays in the
// cache folder. Fetch works again after Close.
func (s *Source) Close() error {
	if !s.inMemory {
		return nil
	}
	s.claimed = false
	return os.RemoveAll(s.trees)
}

// writeTree writes the files of commit h into dir, which appears whole or
// not at all: made from the last revision's files, when they are still
// there, writing and removing only the files that differ (a push of one
// file writes one file, not the repository); else extracted whole.
func (s *Source) writeTree(repo *git.Repository, h plumbing.Hash, dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	last := s.last
	s.last = extracted{}
	if !last.commit.IsZero() && os.Rename(filepath.Join(s.trees, last.commit.String()), tmp) == nil {
		if total, err := advance(repo, last, h, tmp, s.opts.MaxBytes); err == nil {
			s.last = extracted{commit: h, total: total}
			return os.Rename(tmp, dir)
		}
		// Whatever went wrong, a whole extraction says it, or succeeds.
		_ = os.RemoveAll(tmp)
	}
	total, err := extractCommit(repo, h, tmp, s.opts.MaxBytes)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("extract %s: %w", h, err)
	}
	s.last = extracted{commit: h, total: total}
	return os.Rename(tmp, dir)
}

func (s *Source) refName() plumbing.ReferenceName {
	switch {
	case s.opts.Ref.Tag != "":
		return plumbing.NewTagReferenceName(s.opts.Ref.Tag)
	case s.opts.Ref.Branch != "":
		return plumbing.NewBranchReferenceName(s.opts.Ref.Branch)
	}
	return plumbing.NewBranchReferenceName("main")
}

// bareStorage is the bare clone in dir, keeping its pack files open once
// read: go-git otherwise opens the pack again for every object, which was
// most of the time taken to extract a large tree. Close releases them.
// Objects past limits.FileBytes are opened lazily, so their size is known
// from the header without reading them into memory.
// Every pack fetched into it is checked first (packguard.go).
func bareStorage(dir string, maxBytes int64) *guardedStorage {
	st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRUDefault(), filesystem.Options{KeepDescriptors: true, LargeObjectThreshold: limits.FileBytes})
	return &guardedStorage{Storage: st, maxTotal: 2 * maxBytes}
}

// openBare opens the bare clone in dir (see bareStorage).
func openBare(dir string, maxBytes int64) (*git.Repository, *guardedStorage, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, nil, git.ErrRepositoryNotExists
	}
	st := bareStorage(dir, maxBytes)
	repo, err := git.Open(st, nil)
	if err != nil {
		_ = st.Close()
		return nil, nil, err
	}
	return repo, st, nil
}

func (s *Source) clone(ctx context.Context, st *guardedStorage) (*git.Repository, error) {
	if s.opts.Ref.Commit != "" {
		return git.CloneContext(ctx, st, nil, &git.CloneOptions{URL: s.opts.URL, Auth: s.auth, Tags: git.NoTags})
	}
	return git.CloneContext(ctx, st, nil, &git.CloneOptions{
		URL:           s.opts.URL,
		Auth:          s.auth,
		ReferenceName: s.refName(),
		SingleBranch:  true,
		Depth:         1,
		Tags:          git.NoTags,
	})
}

// resolve finds the commit the options name in the clone.
func (s *Source) resolve(repo *git.Repository) (plumbing.Hash, error) {
	if c := s.opts.Ref.Commit; c != "" {
		h := plumbing.NewHash(c)
		if _, err := repo.CommitObject(h); err != nil {
			return h, fmt.Errorf("%w: commit %s: %v", errRefNotFound, c, err)
		}
		return h, nil
	}
	ref, err := repo.Reference(s.refName(), true)
	if err != nil {
		if ref, err = repo.Head(); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("%w: %v", errRefNotFound, err)
		}
	}
	h := ref.Hash()
	// A tag may point at a tag object: peel it to its commit.
	if t, err := repo.TagObject(h); err == nil {
		c, err := t.Commit()
		if err != nil {
			return h, err
		}
		h = c.Hash
	}
	return h, nil
}

// update fetches the ref into an existing clone.
func (s *Source) update(ctx context.Context, repo *git.Repository) (plumbing.Hash, error) {
	if s.opts.Ref.Commit != "" {
		// A commit never changes: the cache is already right.
		return s.resolve(repo)
	}
	ref := s.refName()
	fetch := func(depth int) error {
		return repo.FetchContext(ctx, &git.FetchOptions{
			RemoteName: remoteName,
			// The URL comes from the options on every fetch, never from
			// the clone's configuration on disk.
			RemoteURL: s.opts.URL,
			RefSpecs:  []config.RefSpec{config.RefSpec("+" + ref.String() + ":" + ref.String())},
			Auth:      s.auth,
			Depth:     depth,
			Force:     true,
			Tags:      git.NoTags,
		})
	}
	// A fetch without a depth gets what the new commit adds to the cached
	// one: a fetch of depth 1 makes the server send the whole tree again
	// (TestFetchOfAPushTransfersWhatItAdds). It also brings the commits
	// between the two; if the pack guard refuses any of that (a file past
	// its bound in a commit since reverted, a rewritten branch's history),
	// the new commit is fetched alone, as the clone did, and judged alone.
	err := fetch(0)
	var size *ObjectSizeError
	if errors.As(err, &size) {
		err = fetch(1)
	}
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return plumbing.ZeroHash, err
	}
	h, err := s.resolve(repo)
	if err != nil {
		return h, err
	}
	if _, err := repo.CommitObject(h); err != nil {
		return h, fmt.Errorf("%w: %v", errStaleCache, err)
	}
	return h, nil
}

func (s *Source) checkout(h plumbing.Hash) *Checkout {
	rev := s.opts.Ref.String() + "@sha1:" + h.String()
	if s.opts.Ref.Commit != "" {
		rev = "sha1:" + h.String()
	}
	return &Checkout{Revision: rev, Commit: h.String()}
}

// ScratchDir is a memory-backed folder for short-lived files: /dev/shm
// when it exists and is writable, else "" (the temporary folder).
func ScratchDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if f, err := os.CreateTemp("/dev/shm", ".trainops-probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return "/dev/shm"
		}
	}
	return ""
}

// RefLabel is "branch main", "tag v1" or "commit <hash>", for messages.
func (r Ref) RefLabel() string {
	switch {
	case r.Tag != "":
		return "tag " + r.Tag
	case r.Commit != "":
		return "commit " + r.Commit
	}
	return "branch " + r.String()
}

func (s *Source) String() string {
	return fmt.Sprintf("%s (%s)", Redact(s.opts.URL), s.opts.Ref.RefLabel())
}

var errStaleCache = errors.New("cache unusable")

func retryWithClone(err error) bool {
	return errors.Is(err, errStaleCache) || errors.Is(err, plumbing.ErrObjectNotFound)
}
