// SPDX-License-Identifier: Apache-2.0

package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/testenv"
)

// gitRepo starts a Git server on 127.0.0.1 with one repository, both
// removed at the end of the test.
func gitRepo(t *testing.T, name string) (*gitserver.Server, *gitserver.Repo) {
	t.Helper()
	srv, err := gitserver.Start("", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	repo, err := srv.NewRepo(name, "main", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(repo.Close)
	return srv, repo
}

// startTrainops starts `trainops run` against the test cluster with args,
// its output appended to logPath. It dies with the test binary, and is
// killed at the end of the test at the latest; a failed test shows the
// end of its log.
func startTrainops(t *testing.T, bin, logPath string, args ...string) *testenv.Process {
	t.Helper()
	p, err := testenv.StartProcess(logPath, bin, append([]string{"run", "--kubeconfig=" + env.Kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			raw, _ := os.ReadFile(logPath)
			t.Logf("end of %s:\n%s", filepath.Base(logPath), raw[max(0, len(raw)-4096):])
		}
	})
	return p
}
