// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/render"
)

// TestMain runs the real-node measurement when the harness runs this test
// binary again inside the node's namespace (realNodeCase), as it runs the
// bench binary.
func TestMain(m *testing.M) {
	render.ServeIfChild() // a test that renders starts this binary as the child
	if testenv.InNodeNamespace() {
		if err := measureRealNode(context.Background(), runs()); err != nil {
			fmt.Fprintln(os.Stderr, "real node:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestHarnessSmoke runs the benchmark harness at a small size so it keeps
// working. It asserts that every figure was measured, not how fast.
func TestHarnessSmoke(t *testing.T) {
	dir := t.TempDir()
	bin := testenv.BuildTrainops(t)
	t.Setenv("TRAINOPS_BIN", bin)
	t.Setenv("BENCH_N", "20")
	t.Setenv("BENCH_RUNS", "1")
	t.Setenv("BENCH_DOCS", "0")
	t.Setenv("BENCH_OUT", dir)
	t.Setenv("BENCH_GITSYNCS", "3x5")
	if err := run(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Results
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Sizes) != 1 {
		t.Fatalf("sizes %+v", r.Sizes)
	}
	f := r.Sizes[0]
	for name, v := range map[string]float64{
		"render": f.RenderSeconds, "cold sync": f.ColdSyncSeconds, "floor": f.ColdFloorSeconds, "children": f.ChildrenSeconds,
		"children floor": f.ChildrenFloor, "statuses": f.StatusSeconds, "writes floor": f.WritesFloor, "no-op re-sync": f.NoopSeconds, "no-op requests": f.NoopRequests, "drift": f.DriftSeconds,
		"push": f.PushSeconds, "diff": f.DiffSeconds, "peak RSS": f.PeakRSSMiB, "peak anonymous": f.PeakAnonMiB, "start-up": f.StartupSeconds,
		// What the cold sync and its floor cost (a client's CPU over so
		// few objects may round to nothing).
		"cold sync's API server CPU": f.ColdAPIServerCPU, "cold sync's requests": f.ColdRequests,
		"floor's API server CPU": f.FloorAPIServerCPU, "floor's requests": f.FloorRequests,
		// What the children and the floor's Jobs cost (the controllers'
		// CPU, and the floor's over its few Jobs, may round to nothing).
		"children's API server CPU": f.ChildrenAPIServerCPU, "children's requests": f.ChildrenRequests, "floor Jobs' requests": f.JobsFloorRequests,
		// The sync's own account of its phases, read from its log.
		"cold sync before its first apply": f.ColdBeforeApply, "cold sync's applies": f.ColdApply,
		"push → every Job": f.PushJobsSeconds,
		"cold start":       f.ColdStartSeconds, "cold start's floor": f.ColdStartFloor, "cold start's ratio": f.ColdStartRatio,
	} {
		if v <= 0 {
			t.Errorf("%s not measured (%v)", name, v)
		}
	}
	if f.PeakAnonMiB >= f.PeakRSSMiB {
		t.Errorf("peak anonymous memory %.0f MiB is not a part of the peak RSS %.0f MiB", f.PeakAnonMiB, f.PeakRSSMiB)
	}
	if testenv.NodeMissing() == "" {
		rn := r.RealNode
		if rn == nil || rn.RunningSeconds <= 0 || rn.RunningFloor <= 0 || rn.CompleteSeconds <= 0 || rn.CompleteFloor <= 0 || rn.StackPeakMiB <= 0 {
			t.Errorf("real-node figures not measured: %+v", rn)
		}
	}
	if k := r.Kueue; k == nil || k.PlainSeconds <= 0 || k.QueuedSeconds <= 0 || k.QueuedRatio <= 0 || k.Kept+k.Lost != k.Runs {
		t.Errorf("the gang restart under Kueue not measured: %+v", k)
	} else {
		var docs strings.Builder
		writeKueue(&docs, k)
		if want := fmt.Sprintf("kept its GPUs | %d of %d |", k.Kept, k.Runs); !strings.Contains(docs.String(), want) {
			t.Errorf("the Kueue section does not say %q:\n%s", want, docs.String())
		}
	}
	if f.Kinds != 4 {
		t.Errorf("kinds in the inventory %d, want 4", f.Kinds)
	}
	// The kustomization and overlays layouts, each synced on its own.
	var layouts []string
	for _, l := range f.Layouts {
		layouts = append(layouts, l.Layout)
		for name, v := range map[string]float64{"render": l.RenderSeconds, "cold sync": l.ColdSyncSeconds, "cold floor": l.ColdFloorSeconds, "cold ratio": l.ColdRatio,
			"no-op re-sync": l.NoopSeconds, "push": l.PushSeconds, "diff": l.DiffSeconds, "peak RSS": l.PeakRSSMiB, "peak anonymous": l.PeakAnonMiB} {
			if v <= 0 {
				t.Errorf("layout %s: %s not measured (%v)", l.Layout, name, v)
			}
		}
	}
	if fmt.Sprint(layouts) != "[kustomization overlays]" {
		t.Errorf("layouts measured %v, want [kustomization overlays]", layouts)
	}
	var docs strings.Builder
	writeColdCost(&docs, r.Sizes)
	if !strings.Contains(docs.String(), "| 20 | ") {
		t.Errorf("the cold sync's cost has no row for N = 20:\n%s", docs.String())
	}
	docs.Reset()
	writeLayouts(&docs, r.Sizes)
	if !strings.Contains(docs.String(), "| 20 | overlays |") {
		t.Errorf("the layouts table has no overlays row:\n%s", docs.String())
	}
	// The many-teams case.
	g := r.GitSyncs
	if g == nil || g.GitSyncs != 3 || g.PyJobsEach != 5 {
		t.Fatalf("GitSync case %+v, want 3 GitSyncs of 5 PyJobs", g)
	}
	for name, v := range map[string]float64{"cold sync": g.ColdSeconds, "floor": g.ColdFloorSeconds, "ratio": g.ColdRatio,
		"no-op re-sync": g.NoopSeconds, "no-op requests": g.NoopRequests, "peak RSS": g.PeakRSSMiB, "peak anonymous": g.PeakAnonMiB} {
		if v <= 0 {
			t.Errorf("GitSync case: %s not measured (%v)", name, v)
		}
	}
	docs.Reset()
	writeGitSyncs(&docs, g)
	if !strings.Contains(docs.String(), "| 3 × 5 |") {
		t.Errorf("the GitSync table has no row:\n%s", docs.String())
	}
}

// TestWriteCostsSmoke measures the write costs at a small size so the
// measurement keeps working: every kind of write, made n times.
func TestWriteCostsSmoke(t *testing.T) {
	costs, err := writeCosts(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range costs {
		if c.N != 10 || c.Seconds <= 0 || c.CPUSeconds < 0 || seen[c.Write] {
			t.Errorf("write cost %+v", c)
		}
		seen[c.Write] = true
	}
	if len(seen) != 8 {
		t.Errorf("measured %d kinds of write, want 8: %+v", len(seen), costs)
	}
}
