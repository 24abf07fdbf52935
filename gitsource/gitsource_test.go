// SPDX-License-Identifier: Apache-2.0

package gitsource_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/procmem"
)

const (
	user     = "trainops"
	password = "s3cr3t-p4ssw0rd-do-not-leak"
)

func server(t testing.TB) *gitserver.Server {
	t.Helper()
	s, err := gitserver.Start(user, password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func repo(t testing.TB, s *gitserver.Server, name string) *gitserver.Repo {
	t.Helper()
	r, err := s.NewRepo(name, "main", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func source(t testing.TB, opts gitsource.Options) *gitsource.Source {
	t.Helper()
	if opts.CacheDir == "" {
		opts.CacheDir = t.TempDir()
	}
	src, err := gitsource.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

func read(t *testing.T, co *gitsource.Checkout, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(co.Dir, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFetchFollowsBranchAndForcePush(t *testing.T) {
	s := server(t)
	r := repo(t, s, "org/config.git")
	if err := r.Write("jobs/a.yaml", "v: 1\n"); err != nil {
		t.Fatal(err)
	}
	first, err := r.CommitAndPush("add a")
	if err != nil {
		t.Fatal(err)
	}
	src := source(t, gitsource.Options{URL: s.URL("org/config.git"), Auth: gitsource.Auth{Username: user, Password: password}})
	ctx := context.Background()
	co, err := src.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if co.Revision != "main@sha1:"+first || read(t, co, "jobs/a.yaml") != "v: 1\n" {
		t.Fatalf("revision %s, want main@sha1:%s", co.Revision, first)
	}

	// An incremental fetch picks up the next commit, and removals.
	r.MustWrite(t, "jobs/a.yaml", "v: 2\n")
	r.MustWrite(t, "jobs/b.yaml", "b\n")
	second, err := r.CommitAndPush("change a, add b")
	if err != nil {
		t.Fatal(err)
	}
	co, err = src.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if co.Commit != second || read(t, co, "jobs/a.yaml") != "v: 2\n" {
		t.Fatalf("after push: commit %s, want %s", co.Commit, second)
	}

	// A force-push that rewrites history is followed to the new head.
	r.MustRemove(t, "jobs/b.yaml")
	r.MustWrite(t, "jobs/a.yaml", "v: 3\n")
	rewritten, err := r.AmendAndForcePush("rewrite")
	if err != nil {
		t.Fatal(err)
	}
	co, err = src.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if co.Commit != rewritten || read(t, co, "jobs/a.yaml") != "v: 3\n" {
		t.Fatalf("after force-push: commit %s, want %s", co.Commit, rewritten)
	}
	if _, err := os.Stat(filepath.Join(co.Dir, "jobs/b.yaml")); !os.IsNotExist(err) {
		t.Fatal("file removed by the rewrite is still in the work tree")
	}
}

func TestFetchTagAndCommit(t *testing.T) {
	s := server(t)
	r := repo(t, s, "tags.git")
	r.MustWrite(t, "f", "tagged\n")
	tagged, err := r.CommitAndPush("release")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Tag("v1.0.0"); err != nil {
		t.Fatal(err)
	}
	r.MustWrite(t, "f", "later\n")
	if _, err := r.CommitAndPush("later"); err != nil {
		t.Fatal(err)
	}
	auth := gitsource.Auth{Username: user, Password: password}
	co, err := source(t, gitsource.Options{URL: s.URL("tags.git"), Ref: gitsource.Ref{Tag: "v1.0.0"}, Auth: auth}).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if co.Revision != "v1.0.0@sha1:"+tagged || read(t, co, "f") != "tagged\n" {
		t.Fatalf("tag: %s", co.Revision)
	}
	co, err = source(t, gitsource.Options{URL: s.URL("tags.git"), Ref: gitsource.Ref{Commit: tagged}, Auth: auth}).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if co.Revision != "sha1:"+tagged || read(t, co, "f") != "tagged\n" {
		t.Fatalf("commit: %s", co.Revision)
	}
}

// noSecret fails if err's text holds a credential.
func noSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("error leaks a secret: %v", err)
		}
	}
}

func TestFetchErrorsAreTypedAndClean(t *testing.T) {
	s := server(t)
	repo(t, s, "private.git")
	ctx := context.Background()

	_, err := source(t, gitsource.Options{URL: s.URL("private.git"), Auth: gitsource.Auth{Username: user, Password: "wrong-" + password}}).Fetch(ctx)
	if !errors.Is(err, gitsource.ErrAuthentication) {
		t.Fatalf("wrong password: %v, want ErrAuthentication", err)
	}
	noSecret(t, err, password)
	if !strings.Contains(err.Error(), s.URL("private.git")) {
		t.Errorf("error does not name the repository: %v", err)
	}

	_, err = source(t, gitsource.Options{URL: s.URL("private.git"), Ref: gitsource.Ref{Branch: "nope"}, Auth: gitsource.Auth{Username: user, Password: password}}).Fetch(ctx)
	if !errors.Is(err, gitsource.ErrRefNotFound) || !strings.Contains(err.Error(), "branch nope") {
		t.Fatalf("missing branch: %v, want ErrRefNotFound naming the branch", err)
	}

	_, err = source(t, gitsource.Options{URL: "http://127.0.0.1:1/repo.git", Timeout: 5 * time.Second}).Fetch(ctx)
	if !errors.Is(err, gitsource.ErrUnreachable) {
		t.Fatalf("closed port: %v, want ErrUnreachable", err)
	}

	if _, err := gitsource.New(gitsource.Options{URL: "https://user:" + password + "@example.invalid/r.git", CacheDir: t.TempDir()}); err == nil {
		t.Fatal("credentials in the URL were accepted")
	} else {
		noSecret(t, err, password)
	}
}

func TestFetchOverSSHVerifiesHostKey(t *testing.T) {
	s := server(t)
	r := repo(t, s, "ssh.git")
	r.MustWrite(t, "f", "over ssh\n")
	head, err := r.CommitAndPush("x")
	if err != nil {
		t.Fatal(err)
	}
	key, pub, err := gitserver.NewSSHKey()
	if err != nil {
		t.Fatal(err)
	}
	knownHosts, err := s.StartSSH(pub)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	co, err := source(t, gitsource.Options{URL: s.SSHURL("ssh.git"), Auth: gitsource.Auth{SSHPrivateKey: key, KnownHosts: []byte(knownHosts)}}).Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if co.Commit != head || read(t, co, "f") != "over ssh\n" {
		t.Fatalf("ssh fetch got %s", co.Commit)
	}

	// A known_hosts entry for another key: refused, and said so.
	_, other, _ := gitserver.NewSSHKey()
	fields := strings.Fields(knownHosts)
	wrongHosts := fields[0] + " " + strings.TrimSpace(string(sshAuthorized(other)))
	_, err = source(t, gitsource.Options{URL: s.SSHURL("ssh.git"), Auth: gitsource.Auth{SSHPrivateKey: key, KnownHosts: []byte(wrongHosts)}}).Fetch(ctx)
	if !errors.Is(err, gitsource.ErrHostKey) {
		t.Fatalf("wrong host key: %v, want ErrHostKey", err)
	}
	noSecret(t, err, string(key))

	// A client key the server does not know: authentication fails.
	otherKey, _, _ := gitserver.NewSSHKey()
	_, err = source(t, gitsource.Options{URL: s.SSHURL("ssh.git"), Auth: gitsource.Auth{SSHPrivateKey: otherKey, KnownHosts: []byte(knownHosts)}}).Fetch(ctx)
	if !errors.Is(err, gitsource.ErrAuthentication) {
		t.Fatalf("unknown client key: %v, want ErrAuthentication", err)
	}

	// Without known_hosts nothing is fetched unless skipping is asked for by name.
	if _, err := gitsource.New(gitsource.Options{URL: s.SSHURL("ssh.git"), CacheDir: t.TempDir(), Auth: gitsource.Auth{SSHPrivateKey: key}}); err == nil || !strings.Contains(err.Error(), "known_hosts") {
		t.Fatalf("no known_hosts: %v", err)
	}
	if _, err := source(t, gitsource.Options{URL: s.SSHURL("ssh.git"), Auth: gitsource.Auth{SSHPrivateKey: key, InsecureSkipHostKeyVerification: true}}).Fetch(ctx); err != nil {
		t.Fatalf("explicitly insecure fetch: %v", err)
	}
}

// TestTreesAreKeptInMemoryOneRevisionAtATime checks where a revision's
// files go, that the previous revision's are removed, and that Close frees
// them.
func TestTreesAreKeptInMemoryOneRevisionAtATime(t *testing.T) {
	s := server(t)
	r := repo(t, s, "trees.git")
	commitFile(t, r, "a.yaml", "v: 1\n")
	cache := t.TempDir()
	src := source(t, gitsource.Options{URL: s.URL("trees.git"), CacheDir: cache, Auth: gitsource.Auth{Username: user, Password: password}})
	ctx := context.Background()
	first, err := src.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := cache
	if shm := gitsource.ScratchDir(); shm != "" {
		want = shm
	}
	if !strings.HasPrefix(first.Dir, want+string(filepath.Separator)) {
		t.Fatalf("files in %s, want them under %s", first.Dir, want)
	}
	commitFile(t, r, "a.yaml", "v: 2\n")
	second, err := src.Fetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if read(t, second, "a.yaml") != "v: 2\n" {
		t.Fatal("second revision's file is wrong")
	}
	if _, err := os.Stat(first.Dir); !os.IsNotExist(err) {
		t.Fatalf("the first revision's files are still there: %v", err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if want != cache {
		if _, err := os.Stat(second.Dir); !os.IsNotExist(err) {
			t.Fatalf("Close left the files in memory: %v", err)
		}
	}
	// Fetch works again after Close.
	again, err := src.Fetch(ctx)
	if err != nil || read(t, again, "a.yaml") != "v: 2\n" {
		t.Fatalf("fetch after Close: %v", err)
	}
}

// TestTreeDirOption puts the files where the options say.
func TestTreeDirOption(t *testing.T) {
	s := server(t)
	r := repo(t, s, "treedir.git")
	commitFile(t, r, "a.yaml", "v: 1\n")
	trees := t.TempDir()
	src := source(t, gitsource.Options{URL: s.URL("treedir.git"), TreeDir: trees, Auth: gitsource.Auth{Username: user, Password: password}})
	co, err := src.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(co.Dir) != trees || read(t, co, "a.yaml") != "v: 1\n" {
		t.Fatalf("files in %s, want %s", co.Dir, trees)
	}
	// Close leaves a folder it did not choose alone.
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(co.Dir); err != nil {
		t.Fatalf("Close removed the files of a folder given in the options: %v", err)
	}
}

// commitFile writes one file and pushes it as a commit.
func commitFile(t *testing.T, r *gitserver.Repo, path, content string) {
	t.Helper()
	if err := r.Write(path, content); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CommitAndPush("write " + path); err != nil {
		t.Fatal(err)
	}
}

// peakGrowthKiB runs f and returns how far this process's peak resident
// memory rose above its resident memory before f.
func peakGrowthKiB(t *testing.T, f func()) int {
	t.Helper()
	kib, err := procmem.PeakGrowthKiB(f)
	if err != nil {
		t.Fatal(err)
	}
	return kib
}

// TestFetchRefusesHugeFilesByTheirHeaders: a revision with a 96 MiB file
// of zeros (a few hundred KiB once packed) is refused from the blob's
// header, without its content read into memory or written out; a revision
// past MaxBytes in all is refused too; the next good push is fetched.
func TestFetchRefusesHugeFilesByTheirHeaders(t *testing.T) {
	s := server(t)
	r := repo(t, s, "org/huge.git")
	if err := r.Write("jobs/a.yaml", "v: 1\n"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "data.bin"), make([]byte, 96<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CommitAndPush("add a huge file"); err != nil {
		t.Fatal(err)
	}
	src := source(t, gitsource.Options{URL: s.URL("org/huge.git"), Auth: gitsource.Auth{Username: user, Password: password}})
	var err error
	grew := peakGrowthKiB(t, func() { _, err = src.Fetch(t.Context()) })
	if err == nil || !strings.Contains(err.Error(), "an object of 96 MiB, larger than the 8 MiB a file may be") {
		t.Fatalf("error %v", err)
	}
	if grew > 48<<10 {
		t.Errorf("the fetch took %d MiB more memory: the blob was read", grew>>10)
	}
	t.Logf("peak memory growth during the fetch: %d MiB", grew>>10)

	// The same revision read from a local clone (trainops diff) is
	// refused by the blob's header too, naming the file.
	local, err := gitsource.OpenLocal(r.Dir)
	if err != nil {
		t.Fatal(err)
	}
	grew = peakGrowthKiB(t, func() { _, err = local.Extract("HEAD", t.TempDir()) })
	if err == nil || !strings.Contains(err.Error(), "data.bin: larger than 8 MiB") {
		t.Fatalf("error %v", err)
	}
	if grew > 48<<10 {
		t.Errorf("reading the local revision took %d MiB more memory: the blob was read", grew>>10)
	}

	// Files within the per-file limit, past MaxBytes in all.
	if err := r.Remove("data.bin"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(r.Dir, fmt.Sprintf("part%d.bin", i)), make([]byte, 6<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.CommitAndPush("add three parts"); err != nil {
		t.Fatal(err)
	}
	small := source(t, gitsource.Options{URL: s.URL("org/huge.git"), Auth: gitsource.Auth{Username: user, Password: password}, MaxBytes: 16 << 20})
	if _, err := small.Fetch(t.Context()); err == nil || !strings.Contains(err.Error(), "add up to more than 16 MiB") {
		t.Fatalf("error %v", err)
	}

	// The fix is fetched.
	for i := range 3 {
		if err := r.Remove(fmt.Sprintf("part%d.bin", i)); err != nil {
			t.Fatal(err)
		}
	}
	good, err := r.CommitAndPush("remove the parts")
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []*gitsource.Source{src, small} {
		co, err := src.Fetch(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if co.Commit != good || read(t, co, "jobs/a.yaml") != "v: 1\n" {
			t.Fatalf("fetched %s, want %s", co.Commit, good)
		}
		if _, err := os.Stat(filepath.Join(co.Dir, "data.bin")); err == nil {
			t.Error("the huge file was written out")
		}
	}
}

// TestCredentialsInURLsAreRedacted: a password, a token as the user, and
// a token before an @ in something that is not a URL never reach an
// error or Redact's output; an SSH user stays, as it is no secret.
func TestCredentialsInURLsAreRedacted(t *testing.T) {
	const token = "ghp_TokenNeverShown123"
	for in, want := range map[string]string{
		"https://" + token + "@git.example/ml/c.git":               "https://redacted@git.example/ml/c.git",
		"https://deploy:" + token + "@git.example/ml/c.git":        "https://redacted@git.example/ml/c.git",
		"http://x-access-token:" + token + "@git.example/ml/c.git": "http://redacted@git.example/ml/c.git",
		"ssh://git:" + token + "@git.example/ml/c.git":             "ssh://redacted@git.example/ml/c.git",
		"ssh://git@git.example/ml/c.git":                           "ssh://git@git.example/ml/c.git",
		token + "@git.example/ml/c.git":                            "redacted@git.example/ml/c.git",
		"https://git.example/ml/c.git":                             "https://git.example/ml/c.git",
	} {
		if got := gitsource.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
		_, err := gitsource.New(gitsource.Options{URL: in, CacheDir: t.TempDir()})
		if err != nil && strings.Contains(err.Error(), token) {
			t.Errorf("New(%q): the error shows the token: %v", in, err)
		}
	}
}

// TestSCPLikeURLsAreSSH: the user@host:path form the GitSync CRD accepts
// is taken as the ssh:// URL it stands for, not refused as unparseable.
func TestSCPLikeURLsAreSSH(t *testing.T) {
	_, err := gitsource.New(gitsource.Options{URL: "git@git.example:org/repo.git", CacheDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "an ssh:// repository needs an SSH private key") {
		t.Fatalf("want the error of an ssh:// URL without a key, got %v", err)
	}
	for _, bad := range []string{"git.example:org/repo.git", "@git.example:org", "git@:org", "git@host/x:y"} {
		if _, err := gitsource.New(gitsource.Options{URL: bad, CacheDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "is not a URL") {
			t.Errorf("%q: want refused as not a URL, got %v", bad, err)
		}
	}
}
