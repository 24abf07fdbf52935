// SPDX-License-Identifier: Apache-2.0

package gitsource_test

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trainops/trainops/gitsource"
	gs "github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/testenv"
)

// craftedTrees are trees a hostile team can push (a server without fsck
// takes them), each meant to write outside the checkout or into Git's own
// folder; want is the entry the refusal must name. outside is an absolute
// folder the attacker aims at. An empty want is a tree so malformed that
// any error will do.
func craftedTrees(outside string) []struct {
	name    string
	entries []gs.Entry
	want    string
} {
	up := strings.Repeat("../", 12) + strings.TrimPrefix(outside, "/")
	return []struct {
		name    string
		entries []gs.Entry
		want    string
	}{
		{"symlink d then d/x", []gs.Entry{gs.Symlink("d", outside), gs.File("d/x", "pwned")}, "d"},
		{"symlink d then d/x, relative", []gs.Entry{gs.Symlink("d", up), gs.File("d/x", "pwned")}, "d"},
		{"symlink d inside then d/x", []gs.Entry{gs.Symlink("d", "k"), gs.File("d/x", "pwned"), gs.Folder("k", gs.File("y", "y"))}, "d/x"},
		{"symlink d inside then folder d", []gs.Entry{gs.Symlink("d", "k"), gs.Folder("d", gs.File("x", "x")), gs.Folder("k", gs.File("y", "y"))}, "d"},
		{"symlink d then folder d", []gs.Entry{gs.Symlink("d", outside), gs.Folder("d", gs.File("x", "pwned"))}, "d"},
		{"folder d then symlink d", []gs.Entry{gs.Folder("d", gs.File("x", "pwned")), gs.Symlink("d", outside)}, "d"},
		{"symlink to an absolute folder", []gs.Entry{gs.Folder("k", gs.Symlink("abs", outside))}, "k/abs"},
		{"symlink climbing out", []gs.Entry{gs.Folder("k", gs.Symlink("up", "../.."))}, "k/up"},
		{"symlink to itself then up", []gs.Entry{gs.Symlink("here", "."), gs.Symlink("out", "here/..")}, "out"},
		{"name with a slash", []gs.Entry{gs.File("a/../../x", "pwned")}, "a/../../x"},
		{"name with a backslash", []gs.Entry{gs.File(`a\x`, "pwned")}, "a\\x"},
		{"name that is ..", []gs.Entry{gs.Folder("..", gs.File("x", "pwned"))}, ".."},
		{"name that is .", []gs.Entry{gs.Folder(".", gs.File("x", "pwned"))}, "."},
		{"duplicate files", []gs.Entry{gs.File("a.yaml", "one"), gs.File("a.yaml", "two")}, "a.yaml"},
		{".git folder", []gs.Entry{gs.Folder(".git", gs.File("config", "[core]\n\thooksPath = /tmp\n"))}, ".git"},
		{".GIT folder, NTFS spelling", []gs.Entry{gs.Folder(".GIT. ", gs.File("config", "x"))}, ".GIT. "},
		{"git~1 short name", []gs.Entry{gs.Folder("git~1", gs.File("config", "x"))}, "git~1"},
		{".git with an HFS+ ignorable", []gs.Entry{gs.Folder(".g\u200cit", gs.File("config", "x"))}, ".g\u200cit"},
		// Trees no Git reader decodes: the fetch fails, whatever says so.
		{"empty name", []gs.Entry{gs.File("", "pwned")}, ""},
		{"name with a NUL", []gs.Entry{gs.File("a\x00/../../x", "pwned")}, ""},
		{".gitmodules symlink", []gs.Entry{gs.Symlink(".gitmodules", "a.yaml"), gs.File("a.yaml", "x")}, ".gitmodules"},
	}
}

// TestCraftedTreesWriteNothingOutsideTheCheckout pushes each crafted tree
// to a real Git server and fetches it, first as a fresh clone and then
// into a cache holding a good revision: the revision is refused naming
// the entry, nothing appears in the folder the tree aims at, the clone's
// configuration is unchanged, and the next good push is fetched.
func TestCraftedTreesWriteNothingOutsideTheCheckout(t *testing.T) {
	srv := server(t)
	outside := t.TempDir()
	for _, tc := range craftedTrees(outside) {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.NewReplacer(" ", "-", ",", "", "+", "").Replace(tc.name) + ".git"
			r := repo(t, srv, name)
			good := 0
			for _, warm := range []bool{false, true} {
				src := source(t, gitsource.Options{URL: srv.URL(name), Auth: gitsource.Auth{Username: user, Password: password}})
				if warm {
					if _, err := src.Fetch(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				cache := testenv.CloneConfigs(gitsource.CacheDirOf(src))
				if _, err := srv.CommitTree(name, "main", "crafted", tc.entries); err != nil {
					t.Fatal(err)
				}
				_, err := src.Fetch(context.Background())
				var te *gitsource.TreeEntryError
				if tc.want == "" && err == nil {
					t.Fatalf("warm=%v: a malformed tree was fetched", warm)
				}
				if tc.want != "" && !errors.As(err, &te) {
					t.Fatalf("warm=%v: want the revision refused for its tree, got %v", warm, err)
				}
				if tc.want != "" && !strings.Contains(err.Error(), "tree entry "+strconv.Quote(tc.want)) {
					t.Errorf("warm=%v: the error does not name the entry %s: %v", warm, tc.want, err)
				}
				if strings.Contains(err.Error(), outside) || strings.Contains(err.Error(), os.TempDir()) {
					t.Errorf("warm=%v: the error names a folder of trainops's filesystem: %v", warm, err)
				}
				if got := testenv.FilesUnder(outside); len(got) != 0 {
					t.Fatalf("warm=%v: files appeared outside the checkout: %v", warm, got)
				}
				if after := testenv.CloneConfigs(gitsource.CacheDirOf(src)); warm && after != cache {
					t.Errorf("the clone's configuration changed:\n%s\nwas\n%s", after, cache)
				}
				// The next good push is fetched.
				good++
				if err := r.Write("ok.yaml", strings.Repeat("ok", good)); err != nil {
					t.Fatal(err)
				}
				want, err := r.AmendAndForcePush("good")
				if err != nil {
					t.Fatal(err)
				}
				co, err := src.Fetch(context.Background())
				if err != nil {
					t.Fatalf("warm=%v: the good revision after the crafted one: %v", warm, err)
				}
				if co.Commit != want || read(t, co, "ok.yaml") != strings.Repeat("ok", good) {
					t.Fatalf("warm=%v: got %s, want %s", warm, co.Commit, want)
				}
			}
		})
	}
}

// TestCloneConfigIsNotTrusted rewrites a clone's configuration to send the
// next fetch, with its credentials, to a listener on 127.0.0.1: no request
// reaches the listener, and the fetch gets the configured repository.
func TestCloneConfigIsNotTrusted(t *testing.T) {
	srv := server(t)
	r := repo(t, srv, "config.git")
	var hits atomic.Int32
	trap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		http.NotFound(w, nil)
	}))
	t.Cleanup(trap.Close)
	src := source(t, gitsource.Options{URL: srv.URL("config.git"), Auth: gitsource.Auth{Username: user, Password: password}})
	if _, err := src.Fetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range findClones(t, src) {
		evil := "[core]\n\tbare = true\n[remote \"origin\"]\n\turl = " + trap.URL + "/stolen.git\n"
		if err := os.WriteFile(filepath.Join(cfg, "config"), []byte(evil), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Write("next.yaml", "next"); err != nil {
		t.Fatal(err)
	}
	want, err := r.CommitAndPush("next")
	if err != nil {
		t.Fatal(err)
	}
	co, err := src.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if co.Commit != want {
		t.Errorf("fetched %s, want %s", co.Commit, want)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d requests reached the address the clone's configuration named", n)
	}
	if got := testenv.CloneConfigs(gitsource.CacheDirOf(src)); strings.Contains(got, trap.URL) {
		t.Errorf("the rewritten configuration was kept:\n%s", got)
	}
}

// TestCloneFoldersCannotBeComputed: two caches keep the same repository
// in folders of different names, none derived from the URL alone.
func TestCloneFoldersCannotBeComputed(t *testing.T) {
	srv := server(t)
	repo(t, srv, "place.git")
	var names []string
	for range 2 {
		src := source(t, gitsource.Options{URL: srv.URL("place.git"), Auth: gitsource.Auth{Username: user, Password: password}})
		if _, err := src.Fetch(context.Background()); err != nil {
			t.Fatal(err)
		}
		clones := findClones(t, src)
		if len(clones) != 1 {
			t.Fatalf("want one clone, got %v", clones)
		}
		names = append(names, filepath.Base(filepath.Dir(clones[0])))
	}
	if names[0] == names[1] {
		t.Fatalf("two caches put the clone in the same folder %s", names[0])
	}
}

// findClones lists the bare clones under the source's cache folder.
func findClones(t *testing.T, src *gitsource.Source) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(gitsource.CacheDirOf(src), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "repo.git" {
			out = append(out, p)
		}
		return nil
	})
	return out
}
