// SPDX-License-Identifier: Apache-2.0

// Package trap proves that a render reached nothing outside the
// repository: an HTTP listener on 127.0.0.1 that would answer any request
// with valid YAML and counts them, and fake git, helm, kustomize and
// plugin programs first on PATH that leave a marker file when run.
package trap

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// Programs are the fake programs put first on PATH: what kustomize would
// run for remote Git bases, Helm charts and exec plugins.
var Programs = []string{"git", "helm", "kustomize", "kubectl", "sh-plugin"}

// AliasBomb is a YAML "billion laughs" document of a few hundred bytes:
// each level repeats the one before nine times.
var AliasBomb = func() string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\ndata:\n  a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "  a%d: &a%d [", i, i)
		for j := 0; j < 9; j++ {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}()

// Trap is one listener and one set of fake programs.
type Trap struct {
	// URL is the listener's address, http://127.0.0.1:port.
	URL      string
	requests atomic.Int64
	markers  string
}

// New starts the listener and puts the fake programs first on PATH for
// the rest of the test.
func New(t testing.TB) *Trap {
	t.Helper()
	tr := &Trap{markers: t.TempDir()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.requests.Add(1)
		// Valid YAML for any path, so a build that accepted the entry
		// would succeed rather than fail for another reason.
		_, _ = fmt.Fprint(w, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fetched\n  namespace: default\n")
	}))
	t.Cleanup(srv.Close)
	tr.URL = srv.URL
	bin := t.TempDir()
	// A Git server of the test's own (gitkit) runs the server side of Git
	// from PATH too: those commands, which no client such as kustomize
	// runs, go to the real git.
	realGit, _ := exec.LookPath("git")
	for _, p := range Programs {
		script := fmt.Sprintf("#!/bin/sh\ntouch %q\nexit 0\n", filepath.Join(tr.markers, p))
		if p == "git" && realGit != "" {
			script = fmt.Sprintf("#!/bin/sh\ncase \"$1 $2\" in\nupload-pack*|receive-pack*|\"init --bare\") exec %q \"$@\";;\nesac\ntouch %q\nexit 0\n", realGit, filepath.Join(tr.markers, p))
		}
		if err := os.WriteFile(filepath.Join(bin, p), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return tr
}

// Requests is how many requests reached the listener.
func (tr *Trap) Requests() int64 { return tr.requests.Load() }

// Markers lists the fake programs that ran.
func (tr *Trap) Markers() []string {
	entries, _ := os.ReadDir(tr.markers)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// AssertUntouched fails the test if any request reached the listener or
// any fake program ran.
func (tr *Trap) AssertUntouched(t testing.TB) {
	t.Helper()
	if n := tr.Requests(); n != 0 {
		t.Errorf("%d requests reached the listener on 127.0.0.1", n)
	}
	if m := tr.Markers(); len(m) != 0 {
		t.Errorf("programs ran: %v", m)
	}
}
