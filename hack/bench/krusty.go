// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/render"
)

// KrustyFigures compare renders outside the fast path with the kustomize
// binary of the release whose code trainops links, on the same trees.
type KrustyFigures struct {
	Date string `json:"date,omitempty"`
	// Kustomize is the binary's version, as it prints it.
	Kustomize string       `json:"kustomize"`
	Runs      int          `json:"runs"`
	Trees     []KrustyTree `json:"trees"`
}

// KrustyTree is one tree's figures.
type KrustyTree struct {
	// Tree is the module and the folder in it.
	Tree    string `json:"tree"`
	Objects int    `json:"objects"`
	// KustomizeSeconds is `kustomize build DIR`, a process for each build.
	KustomizeSeconds float64 `json:"kustomizeSeconds"`
	// RenderSeconds is a render as a sync makes it, krusty in the warm
	// render child.
	RenderSeconds float64 `json:"renderSeconds"`
	Ratio         float64 `json:"ratio"`
	// FreshSeconds is the same render with render.reuseChild false: a
	// child started for the build and ended after, as the first render of
	// a process is.
	FreshSeconds float64 `json:"freshChildSeconds"`
	FreshRatio   float64 `json:"freshChildRatio"`
}

// krustyTree is a tree in a module the project pins: the kueue tool
// module's dependencies, real kustomizations of the size users keep.
type krustyTree struct{ module, dir string }

var krustyTrees = []krustyTree{
	{"sigs.k8s.io/kueue", "config/default"},
	{"sigs.k8s.io/kueue", "test/e2e/config/certmanager"},
	{"sigs.k8s.io/jobset", "config/default"},
	{"sigs.k8s.io/lws", "config/default"},
}

// measureKrusty times each tree's render with the fast path off, against
// the kustomize binary, alternating the two, runs times each.
func measureKrusty(ctx context.Context, root string, runs int) (*KrustyFigures, error) {
	bin := filepath.Join(root, "bin", "kustomize")
	v, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s version (make bench builds it): %w", bin, err)
	}
	out := &KrustyFigures{Kustomize: strings.TrimSpace(string(v)), Runs: runs}
	for _, tr := range krustyTrees {
		modDir, version, err := moduleDir(ctx, root, tr.module)
		if err != nil {
			return nil, err
		}
		say("krusty: %s@%s %s", tr.module, version, tr.dir)
		t, err := measureTree(ctx, bin, modDir, tr.dir, runs)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", tr.module, tr.dir, err)
		}
		t.Tree = tr.module + "@" + version + " " + tr.dir
		out.Trees = append(out.Trees, *t)
	}
	return out, nil
}

func measureTree(ctx context.Context, bin, modDir, dir string, runs int) (*KrustyTree, error) {
	warm := render.Limits{NoFastPath: true}
	fresh := render.Limits{NoFastPath: true, FreshChild: true}
	// One of each first: the files in the page cache, the child warm.
	objs, err := render.RenderContext(ctx, modDir, dir, warm)
	if err != nil {
		return nil, err
	}
	want, err := kustomizeObjects(ctx, bin, modDir, dir)
	if err != nil {
		return nil, err
	}
	if len(objs) != want {
		return nil, fmt.Errorf("trainops rendered %d objects, kustomize %d", len(objs), want)
	}
	var kus, warmT, freshT []float64
	for range runs {
		d, err := timed(func() error { return exec.CommandContext(ctx, bin, "build", filepath.Join(modDir, dir)).Run() })
		if err != nil {
			return nil, fmt.Errorf("kustomize build: %w", err)
		}
		kus = append(kus, d)
		for _, l := range []struct {
			limits render.Limits
			into   *[]float64
		}{{warm, &warmT}, {fresh, &freshT}} {
			d, err := timed(func() error { _, err := render.RenderContext(ctx, modDir, dir, l.limits); return err })
			if err != nil {
				return nil, err
			}
			*l.into = append(*l.into, d)
		}
	}
	t := &KrustyTree{Objects: len(objs), KustomizeSeconds: median(kus), RenderSeconds: median(warmT), FreshSeconds: median(freshT)}
	t.Ratio, t.FreshRatio = t.RenderSeconds/t.KustomizeSeconds, t.FreshSeconds/t.KustomizeSeconds
	return t, nil
}

func timed(f func() error) (float64, error) {
	start := time.Now()
	err := f()
	return time.Since(start).Seconds(), err
}

// kustomizeObjects counts the objects `kustomize build` prints.
func kustomizeObjects(ctx context.Context, bin, modDir, dir string) (int, error) {
	cmd := exec.CommandContext(ctx, bin, "build", filepath.Join(modDir, dir))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	raw, err := io.ReadAll(stdout)
	if err != nil {
		return 0, err
	}
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("kustomize build: %w", err)
	}
	n := 0
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err == nil && m["kind"] != nil {
			n++
		}
	}
	return n, nil
}

// moduleDir downloads module at the version the kueue tool module pins,
// and returns its folder in the module cache.
func moduleDir(ctx context.Context, root, module string) (string, string, error) {
	cmd := exec.CommandContext(ctx, "go", "-C", filepath.Join(root, "hack", "tools", "kueue"), "mod", "download", "-json", module)
	raw, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	var m struct{ Dir, Version string }
	if err := json.Unmarshal(raw, &m); err != nil || m.Dir == "" {
		return "", "", fmt.Errorf("go mod download %s: no folder (%v)", module, err)
	}
	return m.Dir, m.Version, nil
}

// printKrusty prints the figures.
func printKrusty(w io.Writer, k *KrustyFigures) {
	if k == nil {
		return
	}
	fmt.Fprintf(w, "\nrenders outside the fast path against %s:\n", k.Kustomize)
	for _, t := range k.Trees {
		fmt.Fprintf(w, "  %-52s %4d objects  kustomize %.3fs  render %.3fs ×%.2f  fresh child %.3fs ×%.2f\n",
			t.Tree, t.Objects, t.KustomizeSeconds, t.RenderSeconds, t.Ratio, t.FreshSeconds, t.FreshRatio)
	}
}

// writeKrusty writes the figures' section of docs/benchmarks.md.
func writeKrusty(b *strings.Builder, k *KrustyFigures) {
	if k == nil {
		return
	}
	fmt.Fprintf(b, `
## Renders outside the fast path

A kustomization the fast path does not build is built by krusty in a
confined child process ([design](design.md)). Each tree below is
rendered with the fast path off, as a sync renders it (the child kept warm
from the build before), against `+"`kustomize build`"+` of the same tree by
the kustomize binary of the release whose code trainops links (%s,
built from the module proxy by `+"`make bench`"+`), a process for each
build as CI runs it; and with `+"`render.reuseChild: false`"+`, a child
started for the build, as the first render of a process is. Medians of %d
builds of each, alternating, measured on %s. Target: within 1.2× the
kustomize binary.

| tree | objects | kustomize build | render (ratio) | fresh child (ratio) |
|---|---|---|---|---|
`, k.Kustomize, k.Runs, k.Date)
	for _, t := range k.Trees {
		fmt.Fprintf(b, "| %s | %d | %.3f s | %.3f s (×%.2f) | %.3f s (×%.2f) |\n", t.Tree, t.Objects, t.KustomizeSeconds, t.RenderSeconds, t.Ratio, t.FreshSeconds, t.FreshRatio)
	}
}

// krustyCase measures the krusty figures unless BENCH_KRUSTY=0, or keeps
// the last run's.
func krustyCase(ctx context.Context, root string, last *Results) (*KrustyFigures, error) {
	if os.Getenv("BENCH_KRUSTY") == "0" {
		if last != nil {
			return last.Krusty, nil
		}
		return nil, nil
	}
	k, err := measureKrusty(ctx, root, 2*runs()+1)
	if err != nil {
		return nil, fmt.Errorf("renders outside the fast path: %w", err)
	}
	k.Date = time.Now().UTC().Format("2006-01-02")
	return k, nil
}
