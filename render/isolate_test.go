// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	fluxkustomize "github.com/fluxcd/pkg/kustomize"
	securefs "github.com/fluxcd/pkg/kustomize/filesys"

	"github.com/trainops/trainops/internal/procmem"
	"github.com/trainops/trainops/internal/trap"
	"github.com/trainops/trainops/render"
)

// These tests run the isolated build directly, without the pre-scan, to
// prove that each limit holds on its own.

// realTree is tree with its root's symlinks resolved, as Render resolves
// it before building.
func realTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(tree(t, files))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func isolated(t *testing.T, root string, l render.Limits) ([]render.Object, error) {
	t.Helper()
	return render.BuildIsolated(t.Context(), root, l)
}

// TestTrapSeesAnUnconfinedBuild is the control: kustomize run in this
// process, as before trainops isolated it, does reach the listener. The
// tests below would see it too.
func TestTrapSeesAnUnconfinedBuild(t *testing.T) {
	tr := trap.New(t)
	root := realTree(t, map[string]string{"kustomization.yaml": "resources:\n- " + tr.URL + "/cm.yaml\n"})
	disk, err := securefs.MakeFsOnDiskSecure(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fluxkustomize.Build(disk, root); err != nil {
		t.Fatal(err)
	}
	if tr.Requests() == 0 {
		t.Fatal("the listener saw no request from an unconfined build")
	}
}

func TestIsolatedBuildReachesNothing(t *testing.T) {
	tr := trap.New(t)
	tests := []struct{ name, kustomization, want string }{
		{"remote file over HTTP", "resources:\n- " + tr.URL + "/cm.yaml\n", "may not reach the network"},
		{"remote base over Git", "resources:\n- " + tr.URL + "/org/repo.git//base?ref=main\n", "git"},
		{"scp Git base", "resources:\n- git@127.0.0.1:org/repo.git//base\n", "git"},
		{"helm chart", "helmCharts:\n- name: c\n  repo: " + tr.URL + "/charts\n  version: 1.0.0\n", "helm"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := realTree(t, map[string]string{"kustomization.yaml": tc.kustomization})
			objs, err := isolated(t, root, render.Limits{})
			if err == nil {
				t.Fatalf("built %d objects", len(objs))
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "kustomization.yaml") {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
			tr.AssertUntouched(t)
		})
	}
}

// TestIsolatedBuildBounded: an alias bomb kustomize would expand for
// minutes and gigabytes is stopped at the memory cap, or at the deadline,
// and this process does not grow.
func TestIsolatedBuildBounded(t *testing.T) {
	root := realTree(t, map[string]string{"kustomization.yaml": "resources:\n- bomb.yaml\n", "bomb.yaml": trap.AliasBomb})
	grew, err := procmem.PeakGrowthKiB(func() { boundedBuilds(t, root) })
	if err != nil {
		t.Fatal(err)
	}
	if grew > 64<<10 {
		t.Errorf("this process grew by %d MiB", grew>>10)
	}
}

func boundedBuilds(t *testing.T, root string) {
	t.Run("memory", func(t *testing.T) {
		_, err := isolated(t, root, render.Limits{MemoryBytes: 256 << 20, Timeout: 5 * time.Minute})
		if err == nil || !strings.Contains(err.Error(), "more than 256 MiB of memory (render.memoryLimit)") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		start := time.Now()
		_, err := isolated(t, root, render.Limits{MemoryBytes: 4 << 30, Timeout: 2 * time.Second})
		if err == nil || !strings.Contains(err.Error(), "longer than 2s (render.timeout)") {
			t.Fatalf("error %v", err)
		}
		if d := time.Since(start); d > time.Minute {
			t.Errorf("the render was stopped after %s", d)
		}
	})
}

// TestIsolatedBuildOutputBounded: output past MaxBytes is cut, though the
// files read were within it.
func TestIsolatedBuildOutputBounded(t *testing.T) {
	files := map[string]string{"kustomization.yaml": "commonAnnotations:\n  a: " + strings.Repeat("x", 4<<10) + "\nresources:\n"}
	for i := range 300 {
		name := "cm" + strconv.Itoa(i) + ".yaml"
		files["kustomization.yaml"] += "- " + name + "\n"
		files[name] = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c" + strconv.Itoa(i) + "\n"
	}
	root := realTree(t, files)
	if _, err := isolated(t, root, render.Limits{}); err != nil {
		t.Fatalf("within the default limits: %v", err)
	}
	_, err := isolated(t, root, render.Limits{MaxBytes: 1 << 20})
	if err == nil || !strings.Contains(err.Error(), "rendered output is larger than 1 MiB (render.maxBytes)") {
		t.Fatalf("error %v", err)
	}
}

// TestIsolatedBuildFilesBounded: kustomize's own reads are held to
// MaxFileBytes.
func TestIsolatedBuildFilesBounded(t *testing.T) {
	root := realTree(t, map[string]string{
		"kustomization.yaml": "configMapGenerator:\n- name: g\n  files:\n  - big.bin\n",
		"big.bin":            strings.Repeat("x", render.MaxFileBytes+1),
	})
	_, err := isolated(t, root, render.Limits{})
	if err == nil || !strings.Contains(err.Error(), "larger than 8 MiB") {
		t.Fatalf("error %v", err)
	}
}

// TestRenderStopsWithItsCaller: a cancelled render returns the caller's
// error, not a build failure.
func TestRenderStopsWithItsCaller(t *testing.T) {
	root := realTree(t, map[string]string{"kustomization.yaml": "resources:\n- bomb.yaml\n", "bomb.yaml": trap.AliasBomb})
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err := render.BuildIsolated(ctx, root, render.Limits{MemoryBytes: 4 << 30})
	if err != context.DeadlineExceeded {
		t.Fatalf("error %v", err)
	}
}
