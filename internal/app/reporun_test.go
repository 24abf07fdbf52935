// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/gitserver"
)

// repoRun starts a Git server on 127.0.0.1 holding the repository path
// (such as "ml/x.git", branch main, empty) and returns it with the
// settings of a `trainops run` in namespace ns that syncs its cluster
// folder every second, pruning, over HTTP with the test's credentials.
// Both are cleaned up with the test.
func repoRun(t *testing.T, path, ns string) (*gitserver.Repo, config.Run) {
	t.Helper()
	_, repo, cfg := repoRunServer(t, path, ns)
	return repo, cfg
}

// repoRunServer is repoRun, returning the Git server too.
func repoRunServer(t *testing.T, path, ns string) (*gitserver.Server, *gitserver.Repo, config.Run) {
	t.Helper()
	srv, err := gitserver.Start(gitUser, gitPassword)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	repo, err := srv.NewRepo(path, "main", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(repo.Close)
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, []byte(gitPassword), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, repo, config.Run{
		Namespace:   ns,
		Controllers: config.Controllers{MaxConcurrentReconciles: 2, RetryDelay: time.Second, AgentImage: "ghcr.io/trainops/trainops:test"},
		Repo: config.Repo{URL: srv.URL(path), Branch: "main", Path: "cluster", Timeout: 20 * time.Second,
			Auth: config.RepoAuth{Username: gitUser, PasswordFile: pwFile}},
		Webhook: config.Webhook{BindAddress: "0"},
		Sync: config.Sync{ReconcileInterval: time.Second, Prune: true, PruneBudget: "50%", Force: true, Concurrency: 4,
			AllowedKinds: config.KindNames(check.DefaultAllowedKinds), CacheDir: filepath.Join(dir, "cache")},
		Render:      config.Render{Timeout: 20 * time.Second, MemoryLimit: 256 << 20, MaxBytes: 16 << 20},
		MetricsAddr: "0", HealthAddr: "0", LogFormat: "console",
	}
}

// inventoryOf reads the inventory of the trainops cfg runs.
func inventoryOf(c client.Client, cfg config.Run) func() (*gitops.Inventory, error) {
	return func() (*gitops.Inventory, error) {
		return gitops.ReadInventory(context.Background(), c, cfg.Namespace, gitops.DefaultName)
	}
}
