// SPDX-License-Identifier: Apache-2.0

package gitsource_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/gitserver"
)

// packs adds up the pack files under dir: their number and bytes.
func packs(t *testing.T, dir string) (n int, bytes int64) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".pack") {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n, bytes = n+1, bytes+info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, bytes
}

// push writes files (path → content) into r, commits and pushes them, and
// returns the commit.
func push(t *testing.T, r *gitserver.Repo, files map[string]string) string {
	t.Helper()
	for p, content := range files {
		if err := r.Write(p, content); err != nil {
			t.Fatal(err)
		}
	}
	commit, err := r.CommitAndPush(fmt.Sprintf("%d files", len(files)))
	if err != nil {
		t.Fatal(err)
	}
	return commit
}

// cachedSource follows repository name of s with a cache of its own,
// returned with it.
func cachedSource(t *testing.T, s *gitserver.Server, name string) (*gitsource.Source, string) {
	t.Helper()
	cache := t.TempDir()
	return source(t, gitsource.Options{URL: s.URL(name), Auth: gitsource.Auth{Username: user, Password: password}, CacheDir: cache}), cache
}

func pyJobFile(name string) string {
	return fmt.Sprintf("apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: %s\n  namespace: team\nspec:\n  image: pytorch:2\n  gpu: 2\n", name)
}

// A push of one file to a large repository fetches about that file, not
// the repository again: a fetch of depth 1 had the server send the whole
// tree on every push, as much as the clone, each time a pack more in the
// cache.
func TestFetchOfAPushTransfersWhatItAdds(t *testing.T) {
	s := server(t)
	r := repo(t, s, "large.git")
	// 2,000 files in 40 team folders: a push rewrites one folder's tree.
	files := map[string]string{}
	for j := range 2000 {
		files[fmt.Sprintf("team-%02d/job-%04d.yaml", j%40, j)] = pyJobFile(fmt.Sprintf("job-%04d", j))
	}
	push(t, r, files)
	src, cache := cachedSource(t, s, "large.git")
	ctx := context.Background()
	if _, err := src.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	_, clone := packs(t, cache)
	for i := range 3 {
		name := fmt.Sprintf("pushed-%d", i)
		commit := push(t, r, map[string]string{"team-07/" + name + ".yaml": pyJobFile(name)})
		_, before := packs(t, cache)
		co, err := src.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, after := packs(t, cache)
		if added := after - before; added <= 0 || added*20 > clone {
			t.Fatalf("the fetch of a one-file push added %d bytes of packs, against %d for the clone of 2,000 files", added, clone)
		}
		if co.Commit != commit {
			t.Fatalf("fetched %s, want %s", co.Commit, commit)
		}
		for _, f := range []string{"team-07/" + name + ".yaml", "team-00/job-0000.yaml", "team-39/job-1999.yaml"} {
			if _, err := os.Stat(filepath.Join(co.Dir, f)); err != nil {
				t.Fatalf("revision %d: %v", i, err)
			}
		}
	}
}

// Every fetch of a new revision adds a pack; past MaxPacks the cache is
// cloned afresh into one, and every revision is still right.
func TestFetchKeepsTheCachesPacksBounded(t *testing.T) {
	s := server(t)
	r := repo(t, s, "busy.git")
	push(t, r, map[string]string{"jobs/seed.yaml": pyJobFile("seed")})
	src, cache := cachedSource(t, s, "busy.git")
	ctx := context.Background()
	most := 0
	for i := range gitsource.MaxPacks + 3 {
		name := fmt.Sprintf("pushed-%02d", i)
		commit := push(t, r, map[string]string{"jobs/" + name + ".yaml": pyJobFile(name)})
		co, err := src.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if co.Commit != commit {
			t.Fatalf("fetch %d: %s, want %s", i, co.Commit, commit)
		}
		entries, err := os.ReadDir(filepath.Join(co.Dir, "jobs"))
		if err != nil || len(entries) != i+2 {
			t.Fatalf("fetch %d: the revision holds %d files (%v), want %d", i, len(entries), err, i+2)
		}
		n, _ := packs(t, cache)
		most = max(most, n)
	}
	if most > gitsource.MaxPacks+1 {
		t.Fatalf("the cache held %d packs, past %d", most, gitsource.MaxPacks+1)
	}
	if n, _ := packs(t, cache); n >= most {
		t.Fatalf("the cache holds %d packs after %d fetches: never cloned afresh", n, gitsource.MaxPacks+3)
	}
}

// A push that brings back a file's content from before the cached commit:
// the server, told only which commit the cache has, sends nothing it holds
// in that commit's history, which a clone of depth 1 lacks. The cache is
// cloned afresh and the revision is right.
func TestFetchOfContentFromBeforeTheClone(t *testing.T) {
	s := server(t)
	r := repo(t, s, "restore.git")
	const old = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: old\n"
	for _, content := range []string{old, strings.Replace(old, "old", "new", 1)} {
		push(t, r, map[string]string{"settings.yaml": content})
	}
	src, _ := cachedSource(t, s, "restore.git")
	ctx := context.Background()
	if _, err := src.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	commit := push(t, r, map[string]string{"settings.yaml": old})
	co, err := src.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(co.Dir, "settings.yaml"))
	if err != nil || string(got) != old || co.Commit != commit {
		t.Fatalf("fetched %s with settings.yaml %q (%v), want %s with %q", co.Commit, got, err, commit, old)
	}
	// The clone, the fetch that found the old content missing, the clone
	// afresh: the case this test is for did happen.
	if n := s.Fetches("restore.git"); n != 3 {
		t.Fatalf("%d fetches, want 3: the server sent the old content, so the test shows nothing", n)
	}
}
