// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"testing"

	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/diff"
	"github.com/trainops/trainops/internal/offline"
)

// BenchmarkOfflineDiff1000 diffs two revisions of a repository of 1,000
// PyJobs that differ in one file, children included.
func BenchmarkOfflineDiff1000(b *testing.B) {
	l := newLocalRepo(b)
	l.write("ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml\n")
	for i := 0; i < 1000; i++ {
		l.write(fmt.Sprintf("jobs/job-%04d.yaml", i), pj(fmt.Sprintf("job-%04d", i), "1"))
	}
	l.commit("base")
	l.branch("feature")
	l.write("jobs/job-0500.yaml", pj("job-0500", "2"))
	l.commit("change one")
	benchDiff(b, l.dir, "main", "feature", ".", func(r *diff.Report) {
		if r.Summary.Update != 2 {
			b.Fatalf("updates %d, want the PyJob and its Job", r.Summary.Update)
		}
	})
}

// benchDiff times the offline diff of base and head in dir, holding each
// report to want.
func benchDiff(b *testing.B, dir, base, head, path string, want func(*diff.Report)) {
	loader, err := offline.NewLoader(offline.Options{AllowedKinds: check.DefaultAllowedKinds, Builder: builder.Options{AgentImage: "x"}})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, _, err := offlineDiff(loader, dir, base, head, path, config.Budget{Percent: 50})
		if err != nil {
			b.Fatal(err)
		}
		want(r)
	}
}

// BenchmarkOfflineDiffOverlays5000 diffs two commits of the base-plus-
// overlays layout of 5,000 objects one PyJob apart, as `make bench` does.
func BenchmarkOfflineDiffOverlays5000(b *testing.B) {
	l := newLocalRepo(b)
	layout := benchrepo.Overlays
	if err := benchrepo.Write(l.dir, benchrepo.Generate(5000, "bench"), layout); err != nil {
		b.Fatal(err)
	}
	l.commit("base")
	if err := benchrepo.Add(l.dir, benchrepo.NewPyJob("bench-0", "added"), layout); err != nil {
		b.Fatal(err)
	}
	l.commit("add one")
	benchDiff(b, l.dir, "HEAD~1", "HEAD", layout.Path(), func(r *diff.Report) {
		if r.Summary.Create == 0 {
			b.Fatal("no creation: the added PyJob was not seen")
		}
	})
}
