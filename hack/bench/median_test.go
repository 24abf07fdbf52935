// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
)

func TestMedianFiguresTakesEachFiguresMedian(t *testing.T) {
	got := medianFigures([]*Figures{
		{N: 10, Kinds: 4, ColdSyncSeconds: 3, ColdRatio: 1.9, PeakRSSMiB: 100, Layouts: []LayoutFigures{{Layout: "overlays", ColdRatio: 1.4}}},
		{N: 10, Kinds: 4, ColdSyncSeconds: 1, ColdRatio: 1.1, PeakRSSMiB: 300, Layouts: []LayoutFigures{{Layout: "overlays", ColdRatio: 1.2}}},
		{N: 10, Kinds: 4, ColdSyncSeconds: 2, ColdRatio: 1.5, PeakRSSMiB: 200, Layouts: []LayoutFigures{{Layout: "overlays", ColdRatio: 1.3}}},
	})
	if got.N != 10 || got.Kinds != 4 || got.ColdSyncSeconds != 2 || got.ColdRatio != 1.5 || got.PeakRSSMiB != 200 {
		t.Fatalf("medians %+v", got)
	}
	if len(got.Layouts) != 1 || got.Layouts[0].Layout != "overlays" || got.Layouts[0].ColdRatio != 1.3 {
		t.Fatalf("layout medians %+v", got.Layouts)
	}
	if len(got.Runs) != 3 || got.Runs[0].ColdRatio != 1.9 || got.Runs[2].ColdRatio != 1.5 {
		t.Fatalf("runs kept %+v", got.Runs)
	}
	var b strings.Builder
	writeRuns(&b, []Figures{*got})
	if !strings.Contains(b.String(), "| 10 | ×1.90, ×1.10, ×1.50 |") {
		t.Fatalf("each run's ratios:\n%s", b.String())
	}
}

// TestKeptSizes: a run that measures some sizes keeps the others from the
// last results, dated, in order of N; a size measured again replaces its
// old figures.
func TestKeptSizes(t *testing.T) {
	last := &Results{Date: "2026-12-01", Sizes: []Figures{{N: 100, ColdRatio: 9}, {N: 5000, ColdRatio: 1.4, Date: "2026-11-30"}, {N: 1000, ColdRatio: 8}}}
	got := keptSizes([]Figures{{N: 1000, ColdRatio: 1.2, Date: "2026-12-02"}}, last)
	var ns []int
	for _, f := range got {
		ns = append(ns, f.N)
	}
	if len(got) != 3 || ns[0] != 100 || ns[1] != 1000 || ns[2] != 5000 {
		t.Fatalf("sizes %v, want 100, 1000, 5000", ns)
	}
	if got[1].ColdRatio != 1.2 || got[1].Date != "2026-12-02" {
		t.Errorf("N = 1000 kept the old figures: %+v", got[1])
	}
	if got[0].Date != "2026-12-01" || got[2].Date != "2026-11-30" {
		t.Errorf("kept sizes dated %q and %q, want the last run's date and their own", got[0].Date, got[2].Date)
	}
	if len(keptSizes(nil, nil)) != 0 {
		t.Error("no last results: nothing kept")
	}
}

// TestSyncPhasesReadsTheLogLine: the phases of a sync's log line as
// trainops writes them, a phase named twice summed.
func TestSyncPhasesReadsTheLogLine(t *testing.T) {
	line := `{"level":"info","msg":"Reconcile finished","applied":1000,"duration":"2.69s","phases":"fetch=80ms render=71ms plan=30ms dryRun=156ms apply=2.314s dryRun=4ms"}`
	got := syncPhases(line)
	want := map[string]float64{"fetch": 0.08, "render": 0.071, "plan": 0.03, "dryRun": 0.16, "apply": 2.314}
	if len(got) != len(want) {
		t.Fatalf("phases %v, want %v", got, want)
	}
	for k, v := range want {
		if d := got[k] - v; d > 1e-9 || d < -1e-9 {
			t.Errorf("phase %s = %v, want %v", k, got[k], v)
		}
	}
	if syncPhases(`{"msg":"Reconcile finished"}`) != nil {
		t.Error("a line without phases gave phases")
	}
}
