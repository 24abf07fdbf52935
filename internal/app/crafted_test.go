// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/controller"
	gs "github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/testenv"
)

// TestCraftedCommitsWriteNothingOutsideTheCheckout pushes trees built to
// write through a symlink (a symlink d, then d/x or a folder d, aiming at a
// folder outside the checkout) to the settings' repository and to a
// team's GitSync, through `trainops run`: each revision is refused naming
// the entry, nothing appears in the folder aimed at or in the cache's
// clone configuration, nothing of the revision is applied, and the next
// good push is.
func TestCraftedCommitsWriteNothingOutsideTheCheckout(t *testing.T) {
	ctx := context.Background()
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	const home, team = "trainops-crafted", "team-crafted"
	srv, repo, cfg := repoRunServer(t, "ml/crafted.git", home)
	for _, ns := range []string{home, team} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	cm := func(ns, name string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  pushed: \"true\"\n", name, ns)
	}
	_ = repo.Write("cluster/good.yaml", cm(home+"-apps", "good"))
	_ = repo.Write("cluster/ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+home+"-apps\n")
	first, err := repo.CommitAndPush("first")
	if err != nil {
		t.Fatal(err)
	}
	// The team's repository, on a server of its own without credentials.
	teamSrv, teamRepo := gitRepo(t, "team.git")
	_ = teamRepo.Write("good.yaml", cm(team, "good"))
	if _, err := teamRepo.CommitAndPush("first"); err != nil {
		t.Fatal(err)
	}
	// Stopped after the GitSync is gone (cleanups run last first).
	t.Cleanup(running(t, cfg))
	inventory := inventoryOf(c, cfg)
	eventually(t, 60*time.Second, func() error {
		inv, err := inventory()
		if err != nil || inv.LastAppliedRevision != "main@sha1:"+first {
			return fmt.Errorf("settings' sync not at the first revision: %v %v", inv, err)
		}
		return nil
	})
	gitSync := &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "training"},
		Spec: gitopsv1alpha1.GitSyncSpec{Repository: gitopsv1alpha1.GitRepository{URL: teamSrv.URL("team.git"), Branch: "main"},
			Interval: &metav1.Duration{Duration: 10 * time.Second}, Prune: true}}
	if err := c.Create(ctx, gitSync); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Delete(ctx, gitSync)
		eventually(t, 60*time.Second, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(gitSync), &gitopsv1alpha1.GitSync{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("GitSync still there: %v", err)
			}
			return nil
		})
	})
	gitSyncAt := func(rev string, refused string) func() error {
		return func() error {
			g := &gitopsv1alpha1.GitSync{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(gitSync), g); err != nil {
				return err
			}
			if refused == "" && (!conditions.IsReady(g) || !strings.HasSuffix(g.Status.LastAppliedRevision, rev)) {
				return fmt.Errorf("GitSync not ready at %s: %+v", rev, g.Status.Conditions)
			}
			if refused != "" && !strings.Contains(fmt.Sprint(g.Status.Conditions), refused) {
				return fmt.Errorf("GitSync does not say %q: %+v", refused, g.Status.Conditions)
			}
			return nil
		}
	}
	eventually(t, 60*time.Second, gitSyncAt("", ""))
	// ask asks the GitSync for a sync now, as a push to the webhook does.
	ask := func(token string) {
		t.Helper()
		g := &gitopsv1alpha1.GitSync{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(gitSync), g); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(g.DeepCopy())
		g.Annotations = map[string]string{controller.AnnotationRequestedAt: token}
		if err := c.Patch(ctx, g, patch); err != nil {
			t.Fatal(err)
		}
	}
	configs := testenv.CloneConfigs(cfg.Sync.CacheDir)

	outside := t.TempDir()
	for i, tc := range []struct {
		name    string
		entries []gs.Entry
		entry   string
	}{
		{"symlink d then d/x", []gs.Entry{gs.Symlink("d", outside), gs.File("d/x", "pwned")}, `"d"`},
		{"symlink d then folder d", []gs.Entry{gs.Symlink("d", "../../../../../../../.."+outside), gs.Folder("d", gs.File("x", "pwned"))}, `"d"`},
		{"symlink d inside then d/x", []gs.Entry{gs.Symlink("d", "cluster"), gs.File("d/x.yaml", cm(home+"-apps", "through-symlink"))}, `"d/x.yaml"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			canary := fmt.Sprintf("canary-%d", i)
			settings := append([]gs.Entry{gs.Folder("cluster",
				gs.File("good.yaml", cm(home+"-apps", "good")), gs.File("ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+home+"-apps\n"),
				gs.File("canary.yaml", cm(home+"-apps", canary)))}, tc.entries...)
			if _, err := srv.CommitTree("ml/crafted.git", "main", tc.name, settings); err != nil {
				t.Fatal(err)
			}
			teams := append([]gs.Entry{gs.File("good.yaml", cm(team, "good")), gs.File("canary.yaml", cm(team, canary))}, tc.entries...)
			crafted, err := teamSrv.CommitTree("team.git", "main", tc.name, teams)
			if err != nil {
				t.Fatal(err)
			}
			ask(crafted)
			want := "tree entry " + tc.entry
			eventually(t, 60*time.Second, func() error {
				if inv, err := inventory(); err != nil || !strings.Contains(inv.LastError, want) {
					return fmt.Errorf("the settings' sync does not refuse the revision for %s: %v %v", want, inv.LastError, err)
				}
				return nil
			})
			eventually(t, 60*time.Second, gitSyncAt("", want))
			if got := testenv.FilesUnder(outside); len(got) != 0 {
				t.Fatalf("files appeared outside the checkout: %v", got)
			}
			if now := testenv.CloneConfigs(cfg.Sync.CacheDir); now != configs {
				t.Errorf("a clone's configuration changed:\n%s\nwas\n%s", now, configs)
			}
			for _, key := range []client.ObjectKey{{Namespace: home + "-apps", Name: canary}, {Namespace: team, Name: canary}, {Namespace: home + "-apps", Name: "through-symlink"}} {
				if err := c.Get(ctx, key, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
					t.Errorf("ConfigMap %s of the refused revision: %v", key, err)
				}
			}
			// The next good push is applied by both.
			_ = repo.Write("cluster/next.yaml", cm(home+"-apps", "next-"+canary))
			good, err := repo.AmendAndForcePush("good after " + tc.name)
			if err != nil {
				t.Fatal(err)
			}
			_ = teamRepo.Write("next.yaml", cm(team, "next-"+canary))
			teamGood, err := teamRepo.AmendAndForcePush("good after " + tc.name)
			if err != nil {
				t.Fatal(err)
			}
			ask(teamGood)
			eventually(t, 60*time.Second, func() error {
				if inv, err := inventory(); err != nil || inv.LastAppliedRevision != "main@sha1:"+good {
					return fmt.Errorf("the settings' sync did not apply the good push: %v", err)
				}
				return nil
			})
			eventually(t, 60*time.Second, gitSyncAt(teamGood, ""))
		})
	}
}
