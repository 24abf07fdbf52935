// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/procmem"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/trap"
)

// TestHostileRevisionsAreRefused pushes, one after another, revisions a
// training-config repository could hold to make trainops reach outside it
// or grow without bound, to `trainops run` on the local control plane.
// Each is refused whole: nothing of it is applied, the listener on
// 127.0.0.1 sees no request, no program runs, the process's peak memory
// stays within 160 MiB of where it was, and the next good push is applied.
func TestHostileRevisionsAreRefused(t *testing.T) {
	tr := trap.New(t)
	repo, cfg := repoRun(t, "ml/hostile.git", "trainops-hostile")
	const ns = "hostile-e2e"
	cm := func(name string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\n", name, ns)
	}
	repo.MustWrite(t, "cluster/namespace.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+ns+"\n")
	repo.MustWrite(t, "cluster/good.yaml", cm("good"))
	repo.MustWrite(t, "cluster/kustomization.yaml", "resources:\n- namespace.yaml\n- good.yaml\n")
	first, err := repo.CommitAndPush("first")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inventory := inventoryOf(c, cfg)
	stop := running(t, cfg)
	defer stop()
	testenv.Eventually(t, 60*time.Second, func() error {
		inv, err := inventory()
		if err != nil {
			return err
		}
		if inv.LastAppliedRevision != "main@sha1:"+first {
			return fmt.Errorf("applied %q", inv.LastAppliedRevision)
		}
		return nil
	})
	outside := filepath.Join(t.TempDir(), "kustomization.yaml")
	_ = os.WriteFile(outside, []byte("secretFieldOutsideTheRepository: x\nresources:\n- good.yaml\n"), 0o644)

	base := "resources:\n- namespace.yaml\n- good.yaml\n- bad.yaml\n"
	// fetch: refused by the fetch, before the revision's files exist,
	// so no attempted revision is recorded; its error is its own.
	cases := []struct {
		name  string
		write func() error
		want  string
		fetch bool
	}{
		{"remote resource over HTTP", func() error {
			return repo.Write("cluster/kustomization.yaml", base+"- "+tr.URL+"/cm.yaml\n")
		}, "/cm.yaml\" is remote content", false},
		{"remote Git base", func() error {
			return repo.Write("cluster/kustomization.yaml", base+"- "+tr.URL+"/org/repo.git//base?ref=main\n")
		}, "org/repo.git//base?ref=main\" is remote content", false},
		{"remote component in scp form", func() error {
			return repo.Write("cluster/kustomization.yaml", base+"components:\n- git@127.0.0.1:org/repo.git//comp\n")
		}, "field components", false},
		{"alias bomb listed in resources", func() error {
			if err := repo.Write("cluster/bomb.yaml", trap.AliasBomb); err != nil {
				return err
			}
			return repo.Write("cluster/kustomization.yaml", base+"- bomb.yaml\n")
		}, "cluster/bomb.yaml", false},
		{"a 40 MiB file reached through a generator", func() error {
			repo.MustRemove(t, "cluster/bomb.yaml")
			if err := os.WriteFile(filepath.Join(repo.Dir, "cluster", "big.bin"), make([]byte, 40<<20), 0o644); err != nil {
				return err
			}
			return repo.Write("cluster/kustomization.yaml", base+"configMapGenerator:\n- name: big\n  namespace: "+ns+"\n  files:\n  - big.bin\n")
		}, "larger than the 8 MiB a file may be", true},
		{"kustomization.yaml a symlink out of the repository", func() error {
			repo.MustRemove(t, "cluster/big.bin")
			repo.MustRemove(t, "cluster/kustomization.yaml")
			// Relative, with ".." enough to reach / from wherever the
			// revision's files are written.
			return os.Symlink(strings.Repeat("../", 24)+strings.TrimPrefix(outside, "/"), filepath.Join(repo.Dir, "cluster", "kustomization.yaml"))
		}, "tree entry \"cluster/kustomization.yaml\": a symlink that leaves the repository", true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := fmt.Sprintf("bad-%d", i)
			if err := repo.Write("cluster/bad.yaml", cm(bad)); err != nil {
				t.Fatal(err)
			}
			if err := tc.write(); err != nil {
				t.Fatal(err)
			}
			rev, err := repo.CommitAndPush(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			var lastErr string
			grew, perr := procmem.PeakGrowthKiB(func() {
				testenv.Eventually(t, 90*time.Second, func() error {
					inv, err := inventory()
					if err != nil {
						return err
					}
					lastErr = inv.LastError
					if !strings.Contains(inv.LastError, tc.want) || !tc.fetch && inv.LastAttemptedRevision != "main@sha1:"+rev {
						return fmt.Errorf("last error %q (attempted %s, want %s)", inv.LastError, inv.LastAttemptedRevision, rev)
					}
					return nil
				})
			})
			if perr != nil {
				t.Fatal(perr)
			}
			if grew > 160<<10 {
				t.Errorf("trainops grew by %d MiB while refusing the revision", grew>>10)
			}
			if strings.Contains(lastErr, "secretFieldOutsideTheRepository") {
				t.Errorf("the error shows a file outside the repository: %s", lastErr)
			}
			err = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: bad}, &corev1.ConfigMap{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("ConfigMap %s of the refused revision: %v", bad, err)
			}
			inv, err := inventory()
			if err != nil {
				t.Fatal(err)
			}
			if inv.LastAppliedRevision != "main@sha1:"+first {
				t.Errorf("applied %s", inv.LastAppliedRevision)
			}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "good"}, &corev1.ConfigMap{}); err != nil {
				t.Errorf("what was running: %v", err)
			}
			tr.AssertUntouched(t)
		})
	}
	t.Run("the next good push is applied", func(t *testing.T) {
		repo.MustRemove(t, "cluster/kustomization.yaml")
		repo.MustWrite(t, "cluster/kustomization.yaml", base)
		good, err := repo.CommitAndPush("fixed")
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 60*time.Second, func() error {
			inv, err := inventory()
			if err != nil {
				return err
			}
			if inv.LastAppliedRevision != "main@sha1:"+good {
				return fmt.Errorf("applied %q, last error %q", inv.LastAppliedRevision, inv.LastError)
			}
			return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("bad-%d", len(cases)-1)}, &corev1.ConfigMap{})
		})
		tr.AssertUntouched(t)
	})
}
