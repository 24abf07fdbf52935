// SPDX-License-Identifier: Apache-2.0

package gitsource_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/trainops/trainops/gitsource"
)

// BenchmarkFetchNewRevision1000 fetches a push that adds 1,000 files into a
// warm cache and extracts its tree, as a cold sync of a large repository
// does.
func BenchmarkFetchNewRevision1000(b *testing.B) { benchmarkFetchNewRevision(b, 1000) }

// BenchmarkFetchNewRevision100 is the same for a push of 100 files, where
// the fixed cost of a fetch shows.
func BenchmarkFetchNewRevision100(b *testing.B) { benchmarkFetchNewRevision(b, 100) }

func benchmarkFetchNewRevision(b *testing.B, files int) {
	s := server(b)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		name := fmt.Sprintf("bench-%d.git", i)
		r := repo(b, s, name)
		if err := r.Write("seed.yaml", "v: 1\n"); err != nil {
			b.Fatal(err)
		}
		if _, err := r.CommitAndPush("seed"); err != nil {
			b.Fatal(err)
		}
		src := source(b, gitsource.Options{URL: s.URL(name), Auth: gitsource.Auth{Username: user, Password: password}})
		if _, err := src.Fetch(ctx); err != nil {
			b.Fatal(err)
		}
		for j := range files {
			if err := r.Write(fmt.Sprintf("jobs/job-%04d.yaml", j), fmt.Sprintf("apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: job-%04d\n  namespace: team\nspec:\n  image: pytorch:2\n  gpu: 2\n", j)); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := r.CommitAndPush("jobs"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		co, err := src.Fetch(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if co.Dir == "" {
			b.Fatal("no tree")
		}
		b.StartTimer()
	}
}
