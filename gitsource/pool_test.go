// SPDX-License-Identifier: Apache-2.0

package gitsource_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trainops/trainops/gitsource"
)

// TestPoolSharesOneFetch: syncs of the same repository, ref and
// credentials asking at once are answered by one fetch; within the window
// no fetch is made again until a push is announced; and credentials that
// differ are never served from another's fetch.
func TestPoolSharesOneFetch(t *testing.T) {
	s := server(t)
	r := repo(t, s, "org/shared.git")
	r.MustWrite(t, "a.yaml", "v: 1\n")
	first, err := r.CommitAndPush("one")
	if err != nil {
		t.Fatal(err)
	}
	pool := &gitsource.Pool{CacheDir: t.TempDir(), Window: time.Hour, Gap: -1}
	opts := gitsource.Options{URL: s.URL("org/shared.git"), Auth: gitsource.Auth{Username: user, Password: password}}
	ctx := context.Background()
	// What one source's first fetch (a clone) asks the server: the
	// measure of "one fetch" below.
	solo := repo(t, s, "org/solo.git")
	solo.MustWrite(t, "a.yaml", "v: 1\n")
	if _, err := solo.CommitAndPush("one"); err != nil {
		t.Fatal(err)
	}
	if _, err := source(t, gitsource.Options{URL: s.URL("org/solo.git"), Auth: opts.Auth}).Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	clone := s.Fetches("org/solo.git")

	var wg sync.WaitGroup
	revs := make([]string, 8)
	for i := range revs {
		wg.Go(func() {
			co, release, err := pool.Fetch(ctx, "team/"+string(rune('a'+i)), opts, time.Time{})
			if err != nil {
				t.Error(err)
				return
			}
			defer release()
			revs[i] = co.Commit
		})
	}
	wg.Wait()
	if n := s.Fetches("org/shared.git"); n != clone {
		t.Errorf("8 syncs asking at once asked the server %d times, one clone asks %d", n, clone)
	}
	for i, rev := range revs {
		if rev != first {
			t.Errorf("sync %d got %q, want %s", i, rev, first)
		}
	}

	// A new commit: within the window the pool does not ask again...
	r.MustWrite(t, "a.yaml", "v: 2\n")
	second, err := r.CommitAndPush("two")
	if err != nil {
		t.Fatal(err)
	}
	co, release, err := pool.Fetch(ctx, "team/a", opts, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	release()
	if co.Commit != first || s.Fetches("org/shared.git") != clone {
		t.Errorf("within the window: got %s after %d requests, want the first revision and no new request", co.Commit, s.Fetches("org/shared.git"))
	}
	// ...until the push is announced, or a sync asks for a fetch after a
	// time.
	pool.Announce(gitsource.RepoKey(s.URL("org/shared.git")), "main")
	for _, u := range []string{"team/a", "team/b"} {
		co, release, err = pool.Fetch(ctx, u, opts, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		release()
		if co.Commit != second {
			t.Errorf("%s after the announced push got %s, want %s", u, co.Commit, second)
		}
	}
	if n := s.Fetches("org/shared.git") - clone; n != 1 {
		t.Errorf("an announced push made %d fetches for two syncs, want 1", n)
	}
	if _, release, err = pool.Fetch(ctx, "team/c", opts, time.Now()); err != nil {
		t.Fatal(err)
	}
	release()
	if n := s.Fetches("org/shared.git") - clone; n != 2 {
		t.Errorf("a sync asking for a fetch from now: %d fetches since the clone, want 2", n)
	}

	// Wrong credentials fail on their own, though the right ones fetched
	// within the window: they share nothing.
	bad := opts
	bad.Auth.Password = "guess"
	if _, _, err := pool.Fetch(ctx, "intruder/x", bad, time.Time{}); err == nil {
		t.Fatal("a sync with wrong credentials was served another's fetch")
	} else if strings.Contains(err.Error(), password) {
		t.Fatal("the error leaks the password")
	}
	if n := pool.Sources(); n != 2 {
		t.Errorf("%d pooled sources, want 2 (one per credentials)", n)
	}
	pool.Leave("intruder/x")
	if n := pool.Sources(); n != 1 {
		t.Errorf("%d pooled sources after the only user of one left, want 1", n)
	}
}

// TestPoolKeepsFilesWhileRead: a fetch that would replace the revision's
// files waits until every sync reading them has released them.
func TestPoolKeepsFilesWhileRead(t *testing.T) {
	s := server(t)
	r := repo(t, s, "org/held.git")
	r.MustWrite(t, "a.yaml", "v: 1\n")
	if _, err := r.CommitAndPush("one"); err != nil {
		t.Fatal(err)
	}
	pool := &gitsource.Pool{CacheDir: t.TempDir(), Window: time.Hour, Gap: -1}
	opts := gitsource.Options{URL: s.URL("org/held.git"), Auth: gitsource.Auth{Username: user, Password: password}}
	ctx := context.Background()
	held, release, err := pool.Fetch(ctx, "team/a", opts, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	r.MustWrite(t, "a.yaml", "v: 2\n")
	second, err := r.CommitAndPush("two")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *gitsource.Checkout, 1)
	go func() {
		co, rel, err := pool.Fetch(ctx, "team/b", opts, time.Now())
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		rel()
		got <- co
	}()
	select {
	case co := <-got:
		t.Fatalf("a fetch replaced files still being read (got %v)", co)
	case <-time.After(500 * time.Millisecond):
	}
	if v := read(t, held, "a.yaml"); v != "v: 1\n" {
		t.Fatalf("the held revision's file reads %q", v)
	}
	release()
	select {
	case co := <-got:
		if co == nil || co.Commit != second {
			t.Fatalf("after release got %v, want %s", co, second)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fetch did not go on after the files were released")
	}
}

func TestRepoKey(t *testing.T) {
	same := []string{
		"https://github.com/Org/Repo.git",
		"https://github.com/Org/Repo",
		"http://token@github.com:443/Org/Repo/",
		"ssh://git@github.com/Org/Repo.git",
		"git@github.com:Org/Repo.git",
		"git@GitHub.com:/Org/Repo",
	}
	want := gitsource.RepoKey(same[0])
	if want != "github.com/Org/Repo" {
		t.Fatalf("RepoKey = %q", want)
	}
	for _, u := range same[1:] {
		if got := gitsource.RepoKey(u); got != want {
			t.Errorf("RepoKey(%q) = %q, want %q", u, got, want)
		}
	}
	for _, u := range []string{"https://github.com/Org/Other.git", "https://gitlab.com/Org/Repo.git", "https://github.com/Org/Repo/sub"} {
		if gitsource.RepoKey(u) == want {
			t.Errorf("RepoKey(%q) is the same repository's", u)
		}
	}
}

// TestPoolFetchesNoMoreOftenThanTheGap: pushes announced as fast as a
// holder of the webhook's secret can send them make one fetch per gap;
// a caller asking sooner is told when to come back, without waiting.
func TestPoolFetchesNoMoreOftenThanTheGap(t *testing.T) {
	s := server(t)
	repo(t, s, "org/noisy.git")
	pool := &gitsource.Pool{CacheDir: t.TempDir(), Gap: time.Hour}
	opts := gitsource.Options{URL: s.URL("org/noisy.git"), Auth: gitsource.Auth{Username: user, Password: password}}
	ctx := context.Background()
	_, release, err := pool.Fetch(ctx, "team/a", opts, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	release()
	before := s.Fetches("org/noisy.git")
	for range 20 {
		pool.Announce(gitsource.RepoKey(s.URL("org/noisy.git")), "main")
		_, _, err := pool.Fetch(ctx, "team/a", opts, time.Time{})
		var soon *gitsource.TooSoonError
		if !errors.As(err, &soon) || soon.Wait <= 0 || soon.Wait > time.Hour {
			t.Fatalf("a fetch within the gap: got %v, want a TooSoonError", err)
		}
	}
	if n := s.Fetches("org/noisy.git") - before; n != 0 {
		t.Fatalf("20 announced pushes within the gap made %d fetches, want 0", n)
	}
}
