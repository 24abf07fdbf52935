package main

import "testing"

func TestMedianFiguresTakesEachFiguresMedian(t *testing.T) {
	got := medianFigures([]*Figures{
		{N: 10, Kinds: 4, ColdSyncSeconds: 3, ColdRatio: 1.9, PeakRSSMiB: 100},
		{N: 10, Kinds: 4, ColdSyncSeconds: 1, ColdRatio: 1.1, PeakRSSMiB: 300},
		{N: 10, Kinds: 4, ColdSyncSeconds: 2, ColdRatio: 1.5, PeakRSSMiB: 200},
	})
	if got.N != 10 || got.Kinds != 4 || got.ColdSyncSeconds != 2 || got.ColdRatio != 1.5 || got.PeakRSSMiB != 200 {
		t.Fatalf("medians %+v", got)
	}
}
