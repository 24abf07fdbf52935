// SPDX-License-Identifier: Apache-2.0

package gitsource

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ShareWindow is how long one fetch serves every sync of the same
// repository, ref and credentials, unless a push to them was announced
// since (Pool.Announce): a sync whose fetch started within it reuses its
// revision instead of asking the Git server again.
const ShareWindow = 15 * time.Second

// MinFetchGap is the least time between two fetches of one pooled source:
// announced pushes (signed, but as many as a holder of the webhook's
// secret cares to send) never make trainops ask one Git server more often.
const MinFetchGap = 2 * time.Second

// TooSoonError is a fetch a caller asked for within MinFetchGap of the
// source's last one: the caller asks again after Wait, rather than waiting.
type TooSoonError struct{ Wait time.Duration }

func (e *TooSoonError) Error() string {
	return fmt.Sprintf("the repository was fetched moments ago: fetching again in %s", e.Wait.Round(time.Millisecond))
}

// Pool shares fetches among syncs that follow the same repository URL, ref
// and credentials: one clone, one extracted tree per revision, and one
// fetch at a time answering all of them. Syncs with different credentials
// never share, so a sync never reads a repository through credentials it
// was not given.
type Pool struct {
	// CacheDir holds one folder of clones per pooled source.
	CacheDir string
	// Window overrides ShareWindow (tests).
	Window time.Duration
	// Gap overrides MinFetchGap (tests; negative: none).
	Gap time.Duration

	mu      sync.Mutex
	entries map[string]*pooled
}

// pooled is one shared Source and its last fetch.
type pooled struct {
	src   *Source
	url   string // normalized (RepoKey)
	ref   Ref
	users map[string]struct{}

	// fetch is held (a token in it) by the one fetch in progress and by a
	// caller deciding whether to reuse the last one; a caller whose
	// context ends stops waiting for it.
	fetch chan struct{}
	// files is held for reading while a caller uses a checkout's files,
	// and for writing by a fetch (which may remove older trees).
	files   sync.RWMutex
	started time.Time // when the last fetch started
	last    *Checkout
	lastErr error
	// announced is when a push to this URL and ref was last announced
	// (Unix nanoseconds); atomic, so an announcement never waits for a
	// fetch in progress.
	announced atomic.Int64
}

// poolKey identifies a pooled source: URL, ref and a digest of the
// credentials (never the credentials themselves).
func poolKey(opts Options) string {
	h := sha256.New()
	for _, s := range []string{opts.URL, opts.Ref.Branch, opts.Ref.Tag, opts.Ref.Commit,
		opts.Auth.Username, opts.Auth.Password, string(opts.Auth.SSHPrivateKey), opts.Auth.SSHPassphrase,
		string(opts.Auth.KnownHosts)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if opts.Auth.InsecureSkipHostKeyVerification {
		h.Write([]byte{1})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// Fetch returns a checkout of opts's repository and ref for user (a name
// the caller keeps, such as a GitSync's namespace/name), fetched at or
// after notBefore and within the pool's window, and a release function
// the caller must call once it no longer reads the checkout's files.
// Concurrent callers of the same source wait for one fetch.
func (p *Pool) Fetch(ctx context.Context, user string, opts Options, notBefore time.Time) (*Checkout, func(), error) {
	e, err := p.entry(user, opts)
	if err != nil {
		return nil, nil, err
	}
	window := cmp.Or(p.Window, ShareWindow)
	gap := cmp.Or(p.Gap, MinFetchGap)
	select {
	case e.fetch <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	if a := time.Unix(0, e.announced.Load()); a.After(notBefore) {
		notBefore = a
	}
	if e.started.IsZero() || e.started.Before(notBefore) || time.Since(e.started) > window {
		if since := time.Since(e.started); !e.started.IsZero() && since < gap {
			<-e.fetch
			return nil, nil, &TooSoonError{Wait: gap - since}
		}
		e.files.Lock()
		e.started = time.Now()
		e.last, e.lastErr = e.src.Fetch(ctx)
		if e.lastErr != nil && ctx.Err() != nil {
			// The caller gave up (deleted, or its own bound): that says
			// nothing of the repository, so the next caller fetches.
			e.started, e.last = time.Time{}, nil
		}
		e.files.Unlock()
	}
	co, err := e.last, e.lastErr
	if err != nil {
		<-e.fetch
		return nil, nil, err
	}
	e.files.RLock()
	<-e.fetch
	cp := *co
	return &cp, sync.OnceFunc(e.files.RUnlock), nil
}

// entry is the pooled source for opts, made on first use; user is
// recorded as one of its users.
func (p *Pool) entry(user string, opts Options) (*pooled, error) {
	key := poolKey(opts)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.entries == nil {
		p.entries = map[string]*pooled{}
	}
	e := p.entries[key]
	if e == nil {
		opts.CacheDir = filepath.Join(p.CacheDir, key)
		src, err := New(opts)
		if err != nil {
			return nil, err
		}
		e = &pooled{src: src, url: RepoKey(opts.URL), ref: opts.Ref, users: map[string]struct{}{}, fetch: make(chan struct{}, 1)}
		p.entries[key] = e
	}
	// A user follows one source at a time: a changed spec leaves the old.
	for k, o := range p.entries {
		if o != e {
			p.leaveLocked(k, o, user)
		}
	}
	e.users[user] = struct{}{}
	return e, nil
}

// Leave records that user no longer follows any pooled source; a source
// nobody follows frees its files in memory.
func (p *Pool) Leave(user string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.entries {
		p.leaveLocked(k, e, user)
	}
}

func (p *Pool) leaveLocked(key string, e *pooled, user string) {
	if _, ok := e.users[user]; !ok {
		return
	}
	delete(e.users, user)
	if len(e.users) > 0 {
		return
	}
	delete(p.entries, key)
	// Wait for a fetch in progress and for readers, off the pool's lock.
	go func() {
		e.fetch <- struct{}{}
		e.files.Lock()
		_ = e.src.Close()
		e.files.Unlock()
		<-e.fetch
	}()
}

// Announce records that a push to the repository key (as RepoKey keys
// it) reached ref (a branch or tag name; "" for any): the next fetch of
// every pooled source following them asks the Git server again, whatever
// the window.
func (p *Pool) Announce(key, ref string) {
	now := time.Now()
	p.mu.Lock()
	for _, e := range p.entries {
		if e.url == key && (ref == "" || (e.ref.Commit == "" && e.ref.String() == ref)) {
			e.announced.Store(now.UnixNano())
		}
	}
	p.mu.Unlock()
}

// Sources is how many pooled sources are kept.
func (p *Pool) Sources() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// RepoKey is a repository URL reduced to what names the repository
// whatever the protocol: lower-case host without port or user, and the
// path without a trailing ".git" or "/". https://github.com/org/repo.git,
// ssh://git@github.com/org/repo and git@github.com:org/repo.git are the
// same key.
func RepoKey(raw string) string {
	raw = strings.TrimSpace(raw)
	if !strings.Contains(raw, "://") {
		// scp-like: [user@]host:path
		if at := strings.Index(raw, "@"); at >= 0 {
			raw = raw[at+1:]
		}
		if host, path, ok := strings.Cut(raw, ":"); ok {
			raw = "ssh://" + host + "/" + strings.TrimPrefix(path, "/")
		}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return strings.ToLower(raw)
	}
	path := strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), ".git")
	return strings.ToLower(u.Hostname()) + "/" + strings.TrimPrefix(path, "/")
}
