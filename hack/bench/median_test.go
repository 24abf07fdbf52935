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
