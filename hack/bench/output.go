// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

func printTable(w io.Writer, fs []Figures) {
	fmt.Fprintf(w, "%6s %10s %14s %14s %8s %14s %16s %12s %10s %8s %10s %10s %9s\n",
		"N", "render/obj", "cold sync", "children", "÷writes", "no-op re-sync", "req/kind", "drift", "push", "diff", "peak RSS", "CPU", "start-up")
	for _, f := range fs {
		fmt.Fprintf(w, "%6d %8.0fµs %6.2fs ×%4.2f %6.2fs ×%4.2f    ×%4.2f %7.3fs %6.0freq %14.1f %10.2fs %8.2fs %7.2fs %4.0fMiB/%3.0f %8.1fs %8.2fs\n",
			f.N, f.RenderPerObjectUs, f.ColdSyncSeconds, f.ColdRatio, f.ChildrenSeconds, f.ChildrenRatio, f.WritesRatio, f.NoopSeconds, f.NoopRequests,
			f.NoopPerKind, f.DriftSeconds, f.PushSeconds, f.DiffSeconds, f.PeakRSSMiB, f.PeakAnonMiB, f.CPUSeconds, f.StartupSeconds)
		if f.ColdStartSeconds > 0 {
			fmt.Fprintf(w, "%6s cold start %.2fs (floor %.2fs) ×%.2f\n", "", f.ColdStartSeconds, f.ColdStartFloor, f.ColdStartRatio)
		}
		for _, l := range f.Layouts {
			fmt.Fprintf(w, "%6s %-14s render %.3fs, cold sync %.2fs (floor %.2fs) ×%.2f, no-op %.3fs %.0freq, push %.2fs, diff %.2fs, peak RSS %.0fMiB (%.0f anonymous)\n",
				"", l.Layout, l.RenderSeconds, l.ColdSyncSeconds, l.ColdFloorSeconds, l.ColdRatio, l.NoopSeconds, l.NoopRequests, l.PushSeconds, l.DiffSeconds, l.PeakRSSMiB, l.PeakAnonMiB)
		}
	}
}

// writeDocs replaces docs/benchmarks.md with this run's figures.
func writeDocs(path string, r Results) error {
	var b strings.Builder
	fmt.Fprintf(&b, `# Benchmarks

Measured by `+"`make bench`"+` (hack/bench) on %s, %s: each figure is the
median of %d runs, each run on a fresh API server, etcd, Git server and
trainops, each ratio against a floor measured in the same run. The harness runs the real `+"`trainops run`"+` binary with its default
settings against kube-apiserver 1.37 and etcd 3.6 on 127.0.0.1 and a real Git
server, syncing repositories of N objects (one namespace per 200, one
SREAgent per 50, one ClusterPolicy, the rest 2×2-GPU PyJobs).
The cold sync and the figures after it run in API mode (etcd and
kube-apiserver only). The children are measured where pods are made, with
kube-controller-manager, kube-scheduler and kwok's two 8-GPU nodes
running: the floor's cluster gets them after its cold apply, and trainops
syncs the same repository on a fresh full control plane of its own.

Reproduce: `+"`%s`"+` (figures also in bench/results.json).
Why trainops is built the way these figures measure: [design decisions](design.md).

Settings of the harness (environment variables of `+"`make bench`"+`):

- `+"`BENCH_N`"+`: the sizes (default 100,1000,5000); `+"`BENCH_RUNS`"+`: the runs each median is taken over (3).
- `+"`BENCH_LAYOUTS`"+`: the repository layouts measured besides the plain folder (default kustomization,overlays; none for none).
- `+"`BENCH_FLOORS=0`"+`: measure no floor and no children, for a quick look at trainops's own figures (no ratios).
- `+"`BENCH_DEBUG=1`"+`: print each phase's API requests by verb and resource and the cores each process used, and keep trainops's log.
- `+"`BENCH_PROFILE=FILE`"+`, `+"`BENCH_APISERVER_PROFILE=FILE`"+`: CPU profiles of trainops (cold sync) and kube-apiserver (children, and the floor's Jobs to FILE.floor, to compare with `+"`go tool pprof -diff_base`"+`; in the many-teams case, its cold sync, to FILE.gitsyncs), `+"`BENCH_PROFILE_CHILDREN=FILE`"+` trainops's in the children, `+"`BENCH_APISERVER_PROFILE_SYNC=FILE`"+` kube-apiserver's over the first two seconds of the cold sync (and of the floor's apply, to FILE.floor); trainops's is an execution trace when FILE ends in .trace, and lasts `+"`BENCH_PROFILE_SECONDS`"+` (10).
- `+"`BENCH_HEAP=FILE`"+`: trainops's heap profile, once the figures that need it are taken; `+"`BENCH_HEAP_PEAK=FILE`"+`: its live heap each time its resident memory passes its highest by 4 MiB, from the cold sync to the last figure (each profile forces a collection: not for quoted figures).
- `+"`BENCH_FLOOR_WATCH=1`"+`: every floor applies while a watch of every PyJob is open, started as an informer starts one, to measure what the watch that trainops's cache keeps costs a burst of applies.
- `+"`BENCH_KRUSTY=0`"+`: keep the last run's renders outside the fast path instead of measuring them; `+"`BENCH_KUEUE=0`"+`: the same for the gang restart under Kueue.
- `+"`BENCH_WRITE_COSTS=N`"+`: only measure kube-apiserver's CPU time per write of each kind a new PyJob's children need.
- `+"`BENCH_REPORT=FILE`"+`: only rewrite this page from a saved results.json; `+"`BENCH_DOCS=0`"+` leaves it alone.

| figure | how | target |
|---|---|---|
| render | time to render the repository, per object | reported |
| cold sync | push of the whole repository, webhook → every object applied | ≤ 1.2× a plain client applying the same objects with server-side apply from 16 goroutines, on a fresh control plane, measured right before the cold sync |
| children | all applied → every PyJob's Job exists | ≤ 1.2× a plain client creating the same Jobs the same way |
| push → every Job | on the full control plane: webhook → every PyJob's Job exists, the sync and the children together | reported |
| children ÷ writes | all applied → every PyJob's status written (its Service before it), against a plain client making every write a PyJob needs: its Job, headless Service, first status and Created Event | reported |
| no-op re-sync | a sync with nothing changed: API requests from apiserver_request_total (the first after a sync that applied writes the GitSync's status once more, its Ready message saying nothing was applied; a run of one shows that request) | ≤ 3 per kind in the inventory |
| drift repair | a PyJob suspended by hand → put back by a sync | reported |
| push → applied | a one-file change, webhook → the object exists | ≤ 2 s at N = 1,000 |
| offline diff | `+"`trainops diff`"+` of two commits one file apart | ≤ 2 s at N = 1,000 |
| memory | peak RSS of `+"`trainops run`"+`, and in brackets its most anonymous memory (heap, stacks, runtime; read every 50 ms): the rest is its own executable's pages, which the kernel may drop and read again | ≤ 100 MiB at N = 1,000, growing ≤ 20 KiB per object from 1,000 to 5,000 |
| start-up | process start → first sync done | reported |
| cold start | process start on a fresh control plane, the repository holding every object and the Git cache empty → every object applied | ≤ 1.2× the floor, measured right before on a fresh control plane of its own |

| N | render/object | cold sync (floor, ratio) | children (floor, ratio) | push → every Job | every status (writes floor, ratio) | no-op re-sync | requests (per kind) | drift repair | push → applied | offline diff | peak RSS (anonymous) | CPU | start-up |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
`, r.Machine, r.Date, r.Runs, r.Command)
	for _, f := range r.Sizes {
		fmt.Fprintf(&b, "| %d | %.0f µs | %.2f s (%.2f s, ×%.2f) | %.2f s (%.2f s, ×%.2f) | %s | %.2f s (%.2f s, ×%.2f) | %.3f s | %.0f (%.1f over %d kinds) | %.2f s | %.2f s | %.2f s | %.0f MiB (%.0f) | %.1f s | %.2f s |\n",
			f.N, f.RenderPerObjectUs, f.ColdSyncSeconds, f.ColdFloorSeconds, f.ColdRatio, f.ChildrenSeconds, f.ChildrenFloor, f.ChildrenRatio, secondsOrDash(f.PushJobsSeconds), f.StatusSeconds, f.WritesFloor, f.WritesRatio,
			f.NoopSeconds, f.NoopRequests, f.NoopPerKind, f.Kinds, f.DriftSeconds, f.PushSeconds, f.DiffSeconds, f.PeakRSSMiB, f.PeakAnonMiB, f.CPUSeconds, f.StartupSeconds)
	}
	for _, f := range r.Sizes {
		otherMachine := f.Machine != "" && f.Machine != r.Machine
		if (f.Date != "" && f.Date != r.Date) || otherMachine {
			on := ""
			if otherMachine {
				on = " on " + f.Machine
			}
			fmt.Fprintf(&b, "\nN = %d was measured on %s%s, by an earlier run; this run did not measure it.\n", f.N, f.Date, on)
		}
	}
	writeRuns(&b, r.Sizes)
	writeColdCost(&b, r.Sizes)
	writeColdStart(&b, r.Sizes)
	writeChildrenCost(&b, r.Sizes)
	writeLayouts(&b, r.Sizes)
	if len(r.Sizes) >= 2 {
		a, z := r.Sizes[len(r.Sizes)-2], r.Sizes[len(r.Sizes)-1]
		if z.N > a.N {
			per := func(lo, hi float64) float64 { return (hi - lo) * 1024 / float64(z.N-a.N) }
			fmt.Fprintf(&b, "\nMemory slope between N = %d and %d: %.1f KiB per object (anonymous: %.1f KiB).\n", a.N, z.N, per(a.PeakRSSMiB, z.PeakRSSMiB), per(a.PeakAnonMiB, z.PeakAnonMiB))
			// Each layout's own, where both sizes measured it.
			for _, hi := range z.Layouts {
				for _, lo := range a.Layouts {
					if lo.Layout == hi.Layout {
						fmt.Fprintf(&b, "The %s layout's: %.1f KiB per object (anonymous: %.1f KiB).\n", hi.Layout, per(lo.PeakRSSMiB, hi.PeakRSSMiB), per(lo.PeakAnonMiB, hi.PeakAnonMiB))
					}
				}
			}
		}
	}
	writeGitSyncs(&b, r.GitSyncs)
	writeKrusty(&b, r.Krusty)
	writeKueue(&b, r.Kueue)
	writeRealNode(&b, r.RealNode)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeColdCost writes where a cold sync's time goes, for the sizes whose
// run recorded it: the CPU each side spent and the requests served.
func writeColdCost(b *strings.Builder, fs []Figures) {
	var rows []string
	for _, f := range fs {
		if f.ColdRequests == 0 || f.FloorRequests == 0 {
			continue
		}
		split := "– | –"
		if f.ColdApply > 0 {
			split = fmt.Sprintf("%.2f s | %.2f s (×%.2f)", f.ColdBeforeApply, f.ColdApply, ratio(f.ColdApply, f.ColdFloorSeconds))
		}
		rows = append(rows, fmt.Sprintf("| %d | %.2f s + %.2f s = %.2f s, %.0f | %.2f s + %.2f s = %.2f s, %.0f | ×%.2f | %s | ×%.2f |",
			f.N, f.FloorAPIServerCPU, f.FloorClientCPU, f.FloorAPIServerCPU+f.FloorClientCPU, f.FloorRequests,
			f.ColdAPIServerCPU, f.ColdClientCPU, f.ColdAPIServerCPU+f.ColdClientCPU, f.ColdRequests,
			ratio(f.ColdAPIServerCPU+f.ColdClientCPU, f.FloorAPIServerCPU+f.FloorClientCPU), split, f.ColdRatio))
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString(`
## Where a cold sync's time goes

The CPU time each side of the cold sync spent, kube-apiserver and etcd
first, then the client (the floor's: the harness; the sync's: trainops),
the API requests served, and the sync's two parts as trainops's log times
them, medians of the runs. On this machine both keep its cores busy, so
what the cold sync costs in CPU beyond the floor's is what makes it
slower: its time ratio moves with its CPU ratio.

The sync has two parts. Before its first apply, trainops fetches the
revision, renders it, lists what the cluster holds and validates every
new object offline with the API server's own code (a revision is applied
whole or not at all); the API server has nothing to do meanwhile, and the
floor, handed its objects ready, has no such part. Then its applies, to
compare with the floor's: beyond the floor's work, trainops decodes the
watch event its caches receive for every object applied, queues the new
objects its hold keeps back, and collects the garbage of the part
before. Sending those events costs the API server little: the floor
takes as long with a PyJob watch open as a cache keeps one
(` + "`BENCH_FLOOR_WATCH=1`" + `). The reconcilers' own
writes for the sync's new objects (a PyJob's Job, an SREAgent's Deployment
and RBAC, the GPU stack's DaemonSets, their statuses and Events) come once
the sync is done ([the hold](design.md)): they are the children's, and
push → every Job counts both. A CPU profile of trainops
(` + "`BENCH_PROFILE`" + `) and of the API server
(` + "`BENCH_APISERVER_PROFILE_SYNC`" + `) shows each part.

| N | floor: CPU, requests | cold sync: CPU, requests | CPU ratio | trainops before its first apply | its applies (ratio to the floor) | time ratio |
|---|---|---|---|---|---|---|
`)
	b.WriteString(strings.Join(rows, "\n") + "\n")
}

// writeChildrenCost writes where the children's time goes, for the sizes
// whose run recorded it: the CPU each run spent until every Job existed,
// and the requests served.
func writeChildrenCost(b *strings.Builder, fs []Figures) {
	var rows []string
	cpu := func(api, ctl, client, reqs float64) string {
		return fmt.Sprintf("%.2f s + %.2f s + %.2f s = %.2f s, %.0f", api, ctl, client, api+ctl+client, reqs)
	}
	for _, f := range fs {
		if f.ChildrenRequests == 0 || f.JobsFloorRequests == 0 {
			continue
		}
		floor := f.JobsFloorAPIServerCPU + f.JobsFloorControllersCPU + f.JobsFloorClientCPU
		children := f.ChildrenAPIServerCPU + f.ChildrenControllersCPU + f.ChildrenClientCPU
		rows = append(rows, fmt.Sprintf("| %d | %s | %s | ×%.2f | ×%.2f |", f.N,
			cpu(f.JobsFloorAPIServerCPU, f.JobsFloorControllersCPU, f.JobsFloorClientCPU, f.JobsFloorRequests),
			cpu(f.ChildrenAPIServerCPU, f.ChildrenControllersCPU, f.ChildrenClientCPU, f.ChildrenRequests),
			ratio(children, floor), f.ChildrenRatio))
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString(`
## Where the children's time goes

From all applied to every PyJob's Job, on the full control plane, the
CPU time each run spent: kube-apiserver and etcd; the controllers
(kube-controller-manager, kube-scheduler, kwok's nodes); the client (the
floor's: the harness creating the Jobs; the children's: trainops); then
the API requests served, medians of the runs. Both make the same Jobs,
one request each, and the Job controller makes the same pods. Beyond
that, trainops's run writes the children of the revision's agents and
GPU stack, which waited for the sync as its PyJobs did ([the
hold](design.md)), and trainops's caches receive every event of the Jobs
and of their pods, which costs the API server the sending and trainops
the decoding, on the same cores as the rest. As for the cold sync, the
time ratio follows the CPU ratio. ` + "`BENCH_APISERVER_PROFILE`" + ` profiles the
API server in both runs (` + "`go tool pprof -diff_base`" + ` compares them),
` + "`BENCH_PROFILE_CHILDREN`" + ` trainops.

| N | floor's Jobs: CPU (API server + controllers + client = all), requests | children: CPU, requests | CPU ratio | time ratio |
|---|---|---|---|---|
`)
	b.WriteString(strings.Join(rows, "\n") + "\n")
}

// writeRealNode writes the real node's figures, when measured.
func writeRealNode(b *strings.Builder, f *RealNodeFigures) {
	if f == nil {
		return
	}
	fmt.Fprintf(b, `
## A PyJob on the real node

A PyJob of 2 workers × 2 torchrun processes training
testdata/realnode/train.py (gloo, CPU) on the real node
([the real node](real-node.md)), against the floor: the same Indexed Job
and headless Service created directly, whose pods do the same work, one
after the other in each run, after a warm-up run (the training image's
first container unpacks it). Measured on %s. Target: within 1.2× the floor;
the whole stack (control plane, kubelet, containerd, kube-proxy, CoreDNS)
under 1.5 GiB.

| figure | PyJob | floor | ratio |
|---|---|---|---|
| create → every worker Running | %.2f s | %.2f s | ×%.2f |
| create → done (Succeeded; the floor's Job Complete) | %.2f s | %.2f s | ×%.2f |

Peak resident memory of the whole stack: %.0f MiB.
`, f.Date, f.RunningSeconds, f.RunningFloor, f.RunningRatio, f.CompleteSeconds, f.CompleteFloor, f.CompleteRatio, f.StackPeakMiB)
}

// writeLayouts writes the table of the figures that depend on how the
// repository keeps its files.
func writeLayouts(b *strings.Builder, fs []Figures) {
	if len(fs) == 0 || len(fs[0].Layouts) == 0 {
		return
	}
	b.WriteString(`
## Repository layouts

The same objects, kept the ways training-config repositories keep them,
each synced on a fresh control plane in the same run (each cold sync's
ratio is against a floor measured on a fresh control plane of its own
right before it): **plain**, a folder of YAML files without a
kustomization (the table above); **kustomization**, the same files listed
in one kustomization.yaml; **overlays**, a folder per team with its own
kustomization (setting its namespace), a base listing the teams and the
GPU stack, and two overlays (clusters/dev, clusters/prod) adding labels, an
annotation and two patches, as examples/ is built; trainops syncs
clusters/prod. Targets for kustomization and overlays: render ≤ 0.25 s at
N = 1,000, cold sync ≤ 1.5× the floor, push → applied ≤ 0.5 s at N =
1,000, offline diff ≤ 1 s at N = 1,000 and ≤ 2 s at N = 5,000.

| N | layout | render (per object) | cold sync (floor, ratio) | no-op re-sync (requests) | push → applied | offline diff | peak RSS (anonymous) |
|---|---|---|---|---|---|---|---|
`)
	for _, f := range fs {
		fmt.Fprintf(b, "| %d | plain | %.3f s (%.0f µs) | %s | %.3f s (%.0f) | %.2f s | %.2f s | %.0f MiB (%.0f) |\n",
			f.N, f.RenderSeconds, f.RenderPerObjectUs, coldCell(f.ColdSyncSeconds, f.ColdFloorSeconds, f.ColdRatio), f.NoopSeconds, f.NoopRequests, f.PushSeconds, f.DiffSeconds, f.PeakRSSMiB, f.PeakAnonMiB)
		for _, l := range f.Layouts {
			fmt.Fprintf(b, "| %d | %s | %.3f s (%.0f µs) | %s | %.3f s (%.0f) | %.2f s | %.2f s | %.0f MiB (%.0f) |\n",
				f.N, l.Layout, l.RenderSeconds, l.RenderPerObjectUs, coldCell(l.ColdSyncSeconds, l.ColdFloorSeconds, l.ColdRatio), l.NoopSeconds, l.NoopRequests, l.PushSeconds, l.DiffSeconds, l.PeakRSSMiB, l.PeakAnonMiB)
		}
	}
}

// coldCell is a cold sync with its floor and ratio; results recorded
// before each layout had a floor of its own give the ratio alone.
func coldCell(secs, floor, ratio float64) string {
	if floor == 0 {
		return fmt.Sprintf("%.2f s (×%.2f)", secs, ratio)
	}
	return fmt.Sprintf("%.2f s (%.2f s, ×%.2f)", secs, floor, ratio)
}

// writeRuns lists, for the figures whose spread between runs is widest,
// each run's own value.
func writeRuns(b *strings.Builder, fs []Figures) {
	if len(fs) == 0 || len(fs[0].Runs) == 0 {
		return
	}
	b.WriteString("\nEach run's own ratios, of which the table gives the medians:\n\n| N | cold sync | children | every status |\n|---|---|---|---|\n")
	for _, f := range fs {
		var cold, children, status []string
		for _, r := range f.Runs {
			cold = append(cold, fmt.Sprintf("×%.2f", r.ColdRatio))
			children = append(children, fmt.Sprintf("×%.2f (%.1f s)", r.ChildrenRatio, r.ChildrenSeconds))
			status = append(status, fmt.Sprintf("×%.2f", r.WritesRatio))
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s |\n", f.N, strings.Join(cold, ", "), strings.Join(children, ", "), strings.Join(status, ", "))
	}
}

// secondsOrDash is secs as the tables write seconds, or a dash for a
// figure an earlier run did not measure.
func secondsOrDash(secs float64) string {
	if secs <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f s", secs)
}

// writeColdStart writes the cold start of the sizes whose run measured it.
func writeColdStart(b *strings.Builder, fs []Figures) {
	var rows []string
	for _, f := range fs {
		if f.ColdStartSeconds == 0 {
			continue
		}
		var each []string
		for _, r := range f.Runs {
			each = append(each, fmt.Sprintf("×%.2f", r.ColdStartRatio))
		}
		rows = append(rows, fmt.Sprintf("| %d | %.2f s (%.2f s, ×%.2f) | %s |", f.N, f.ColdStartSeconds, f.ColdStartFloor, f.ColdStartRatio, strings.Join(each, ", ")))
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString(`
## From process start

A new trainops process on a fresh control plane, its repository already
holding every object and its Git cache empty, as when trainops is first
deployed: from the process's start to every object applied, against a
plain client applying the same objects on a fresh control plane of its
own right before. Beyond the cold sync's work, it starts its caches and
clones the repository whole. Target: ≤ 1.2× the floor.

| N | cold start (floor, ratio) | each run |
|---|---|---|
`)
	b.WriteString(strings.Join(rows, "\n") + "\n")
}
