// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/workload"
	"github.com/trainops/trainops/internal/workload/workloadtest"
)

// writeCases replaces the repository's PyJobs with a good one and the
// cases, each in a file of its own, and pushes them.
func writeCases(t *testing.T, repo *gitserver.Repo, ns string, cases []workloadtest.Case, first int) string {
	t.Helper()
	if err := repo.Remove("pyjobs"); err != nil {
		t.Fatal(err)
	}
	if err := repo.Write(filepath.Join("pyjobs", "good.yaml"), benchrepo.PyJobYAML(ns, "good")); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		doc, err := c.YAML(ns, fmt.Sprintf("case-%d", first+i))
		if err != nil {
			t.Fatal(err)
		}
		if err := repo.Write(filepath.Join("pyjobs", fmt.Sprintf("case-%d.yaml", first+i)), string(doc)); err != nil {
			t.Fatal(err)
		}
	}
	rev, err := repo.CommitAndPush(fmt.Sprintf("cases %d-%d", first, first+len(cases)-1))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestGitSyncRefusesEveryCase: a team's GitSync (acting as a ServiceAccount
// that may write PyJobs) is refused every case of the workload policy,
// ten at a time: the revision is ValidationFailed, its lastError names
// each case's file, field and setting, and nothing of it is applied (not
// even its good PyJob).
func TestGitSyncRefusesEveryCase(t *testing.T) {
	home, team := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	git := startGitSyncs(t, home, func(s *GitSyncSettings) { s.Workload = workload.Policy{RefuseSecretRefs: true} })
	sa := teamServiceAccount(t, team)
	repo := teamRepo(t, git, "cases.git")
	gs := newGitSync(t, git, team, "training", "cases.git", sa)
	const batch = 10
	for first := 0; first < len(workloadtest.Cases); first += batch {
		cases := workloadtest.Cases[first:min(first+batch, len(workloadtest.Cases))]
		rev := writeCases(t, repo, team, cases, first)
		annotate(t, gs, rev)
		got := waitGitSync(t, gs, "refusing "+rev, stalledOn(rev, gitops.ReasonValidationFailed))
		for i, c := range cases {
			file := fmt.Sprintf("pyjobs/case-%d.yaml", first+i)
			if !namesCase(got.Status.LastError, file, c) {
				t.Errorf("%s: lastError does not name %s, %s and %s: %+v", c.Name, file, c.Field, c.Setting, got.Status.LastError)
			}
			if pyjobExists(t, team, fmt.Sprintf("case-%d", first+i)) {
				t.Errorf("%s: applied", c.Name)
			}
		}
		if pyjobExists(t, team, "good") {
			t.Fatal("the good PyJob of a refused revision was applied")
		}
	}
}

// TestGitSyncAppliesCasesTheSettingsAllow: with every setting that allows
// a case set, the same cases are applied.
func TestGitSyncAppliesCasesTheSettingsAllow(t *testing.T) {
	home, team := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	var policy workload.Policy
	var allowed []workloadtest.Case
	for _, c := range workloadtest.Cases {
		if c.Allow != nil {
			c.Allow(&policy)
			allowed = append(allowed, c)
		}
	}
	git := startGitSyncs(t, home, func(s *GitSyncSettings) { s.Workload = policy })
	sa := teamServiceAccount(t, team)
	repo := teamRepo(t, git, "allowed.git")
	gs := newGitSync(t, git, team, "training", "allowed.git", sa)
	rev := writeCases(t, repo, team, allowed, 0)
	annotate(t, gs, rev)
	waitGitSync(t, gs, "applying "+rev, ready(rev))
	for i, c := range allowed {
		if !pyjobExists(t, team, fmt.Sprintf("case-%d", i)) {
			t.Errorf("%s: not applied with its setting", c.Name)
		}
	}
}

// namesCase reports whether one of problems is about file and names c's
// field and setting.
func namesCase(problems []gitopsv1alpha1.SyncProblem, file string, c workloadtest.Case) bool {
	for _, p := range problems {
		if p.File == file && strings.Contains(p.Message, c.Field) && strings.Contains(p.Message, c.Setting) {
			return true
		}
	}
	return false
}
