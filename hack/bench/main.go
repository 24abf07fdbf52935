// SPDX-License-Identifier: Apache-2.0

// Command bench measures trainops as the training-config repository grows:
// render, cold sync, children, no-op re-sync, drift repair, push to
// applied, offline diff, memory and start-up, each against a floor measured
// in the same run where there is one. It runs the real `trainops run`
// binary against the local control plane the tests use and a real Git
// server on 127.0.0.1, and writes a table, bench/results.json and
// docs/benchmarks.md. Children are measured in full mode, where the Job
// controller makes pods on kwok's GPU nodes; everything else in API mode.
//
// BENCH_N selects the sizes (default "100,1000,5000"); BENCH_RUNS the
// number of runs, each on a fresh control plane, that medians are taken
// over (default 3); BENCH_OUT the folder for results.json (default bench/);
// BENCH_LAYOUTS the repository layouts measured besides the plain folder
// (default "kustomization,overlays"; "none" for none);
// BENCH_GITSYNCS the many-teams case (default "50x100": 50 GitSyncs of 100
// PyJobs each, one repository each; "0" skips it; with BENCH_N=none it is
// all that is measured, the sizes' figures kept from the last results.json);
// BENCH_DOCS=0 leaves docs/benchmarks.md alone. Sizes and the many-teams
// case a run does not measure are kept from the last results.json, dated. BENCH_FLOORS=0 measures no
// floor and no children, for a quick look. BENCH_DEBUG=1 prints the
// API requests of each phase and keeps trainops's log; BENCH_PROFILE=FILE
// saves trainops's CPU profile (an execution trace if FILE ends in .trace)
// from the cold sync on, for BENCH_PROFILE_SECONDS (default 10);
// BENCH_HEAP=FILE its heap profile once the figures that need it are taken;
// BENCH_HEAP_PEAK=FILE its live heap as its resident memory grows;
// BENCH_APISERVER_PROFILE=FILE 5 s of kube-apiserver's from the children
// phase on (and, to FILE.floor, from the floor's Jobs on; to
// FILE.gitsyncs, from the many-teams cold sync on, for
// BENCH_PROFILE_SECONDS), BENCH_PROFILE_CHILDREN=FILE trainops's. BENCH_REPORT=FILE measures nothing: it prints a saved
// results.json and writes docs/benchmarks.md from it. BENCH_WRITE_COSTS=N
// measures only what N writes of each kind a new PyJob's children need
// cost kube-apiserver in CPU. BENCH_KRUSTY=0 keeps the last run's figures
// of renders outside the fast path against the kustomize binary instead of
// measuring them.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/render"
)

// Figures are one size's measurements.
type Figures struct {
	N int `json:"n"`
	// Date is when this size was measured, and Machine on what.
	Date              string  `json:"date,omitempty"`
	Machine           string  `json:"machine,omitempty"`
	RenderSeconds     float64 `json:"renderSeconds"`
	RenderPerObjectUs float64 `json:"renderPerObjectMicroseconds"`
	ColdSyncSeconds   float64 `json:"coldSyncSeconds"`
	ColdFloorSeconds  float64 `json:"coldSyncFloorSeconds"`
	ColdRatio         float64 `json:"coldSyncRatio"`
	// ColdAPIServerCPU, ColdClientCPU and ColdRequests are what the cold
	// sync cost: CPU seconds of kube-apiserver and etcd, of trainops, and
	// the API requests served; the Floor ones the same for the floor's
	// apply, its client the harness. On a machine whose cores both keep
	// busy, the times' ratio follows the CPU's.
	ColdAPIServerCPU  float64 `json:"coldSyncAPIServerCPUSeconds,omitempty"`
	ColdClientCPU     float64 `json:"coldSyncTrainopsCPUSeconds,omitempty"`
	ColdRequests      float64 `json:"coldSyncRequests,omitempty"`
	FloorAPIServerCPU float64 `json:"coldFloorAPIServerCPUSeconds,omitempty"`
	FloorClientCPU    float64 `json:"coldFloorClientCPUSeconds,omitempty"`
	FloorRequests     float64 `json:"coldFloorRequests,omitempty"`
	// ColdBeforeApply and ColdApply split the cold sync as trainops's log
	// times it: its work before the first apply (fetch, render, plan,
	// offline validation), while the API server waits, and its applies.
	ColdBeforeApply float64 `json:"coldSyncBeforeApplySeconds,omitempty"`
	ColdApply       float64 `json:"coldSyncApplySeconds,omitempty"`
	ChildrenSeconds float64 `json:"childrenSeconds"`
	ChildrenFloor   float64 `json:"childrenFloorSeconds"`
	ChildrenRatio   float64 `json:"childrenRatio"`
	// The Children ones are what the children cost until every Job
	// exists, the JobsFloor ones what the floor's Jobs did: CPU seconds of
	// kube-apiserver and etcd, of the controllers (kube-controller-manager,
	// kube-scheduler, kwok), of the client (trainops; the harness), and the
	// API requests served.
	ChildrenAPIServerCPU    float64 `json:"childrenAPIServerCPUSeconds,omitempty"`
	ChildrenControllersCPU  float64 `json:"childrenControllersCPUSeconds,omitempty"`
	ChildrenClientCPU       float64 `json:"childrenTrainopsCPUSeconds,omitempty"`
	ChildrenRequests        float64 `json:"childrenRequests,omitempty"`
	JobsFloorAPIServerCPU   float64 `json:"childrenFloorAPIServerCPUSeconds,omitempty"`
	JobsFloorControllersCPU float64 `json:"childrenFloorControllersCPUSeconds,omitempty"`
	JobsFloorClientCPU      float64 `json:"childrenFloorClientCPUSeconds,omitempty"`
	JobsFloorRequests       float64 `json:"childrenFloorRequests,omitempty"`
	// PushJobsSeconds is, on the full control plane, from the push's
	// webhook to every PyJob's Job: the sync and the children together.
	PushJobsSeconds float64 `json:"pushToJobsSeconds,omitempty"`
	// StatusSeconds is from all applied to every PyJob's status written,
	// its Service before it: all of the children's writes.
	StatusSeconds float64 `json:"childrenStatusSeconds"`
	// WritesFloor is the Jobs floor plus a plain client's other writes
	// for each PyJob (Service, status, Event): the least work the API
	// server must do for the children. WritesRatio is StatusSeconds over
	// it.
	WritesFloor  float64 `json:"childrenWritesFloorSeconds"`
	WritesRatio  float64 `json:"childrenWritesRatio"`
	NoopSeconds  float64 `json:"noopResyncSeconds"`
	NoopRequests float64 `json:"noopResyncRequests"`
	Kinds        int     `json:"kindsInInventory"`
	NoopPerKind  float64 `json:"noopResyncRequestsPerKind"`
	DriftSeconds float64 `json:"driftRepairSeconds"`
	PushSeconds  float64 `json:"pushToAppliedSeconds"`
	DiffSeconds  float64 `json:"offlineDiffSeconds"`
	PeakRSSMiB   float64 `json:"peakRSSMiB"`
	// PeakAnonMiB is the most anonymous memory trainops held (its heap,
	// stacks and runtime), read every 50 ms; the rest of its RSS is its
	// own executable's pages, which the kernel can drop and read again.
	PeakAnonMiB    float64 `json:"peakAnonMiB"`
	CPUSeconds     float64 `json:"cpuSeconds"`
	StartupSeconds float64 `json:"startupSeconds"`
	// ColdStartSeconds is a new process on a fresh control plane, its
	// repository holding every object: process start → every object
	// applied; ColdStartFloor the cold floor measured right before it.
	ColdStartSeconds float64 `json:"coldStartSeconds,omitempty"`
	ColdStartFloor   float64 `json:"coldStartFloorSeconds,omitempty"`
	ColdStartRatio   float64 `json:"coldStartRatio,omitempty"`
	// Layouts are the figures that depend on how the repository keeps its
	// files, for each layout but the plain folder (whose figures are the
	// ones above).
	Layouts []LayoutFigures `json:"layouts,omitempty"`
	// Runs are each run's own figures, of which the above are medians.
	Runs []Figures `json:"runs,omitempty"`
}

// LayoutFigures are the figures of one repository layout.
type LayoutFigures struct {
	Layout            string  `json:"layout"`
	RenderSeconds     float64 `json:"renderSeconds"`
	RenderPerObjectUs float64 `json:"renderPerObjectMicroseconds"`
	ColdSyncSeconds   float64 `json:"coldSyncSeconds"`
	ColdFloorSeconds  float64 `json:"coldSyncFloorSeconds"`
	ColdRatio         float64 `json:"coldSyncRatio"`
	NoopSeconds       float64 `json:"noopResyncSeconds"`
	NoopRequests      float64 `json:"noopResyncRequests"`
	PushSeconds       float64 `json:"pushToAppliedSeconds"`
	DiffSeconds       float64 `json:"offlineDiffSeconds"`
	PeakRSSMiB        float64 `json:"peakRSSMiB"`
	PeakAnonMiB       float64 `json:"peakAnonMiB"`
}

// Results are a whole run.
type Results struct {
	Machine string    `json:"machine"`
	Date    string    `json:"date"`
	Runs    int       `json:"runs"`
	Sizes   []Figures `json:"sizes"`
	Command string    `json:"command"`
	// GitSyncs is the many-teams case, when measured.
	GitSyncs *GitSyncFigures `json:"gitSyncs,omitempty"`
	// RealNode is a distributed PyJob on the real node, when the machine
	// can run one.
	RealNode *RealNodeFigures `json:"realNode,omitempty"`
	// Krusty compares renders outside the fast path with the kustomize
	// binary, when measured.
	Krusty *KrustyFigures `json:"krusty,omitempty"`
	// Kueue is what a gang restart costs under Kueue, when measured.
	Kueue *KueueFigures `json:"kueue,omitempty"`
}

func main() {
	render.ServeIfChild()
	// The harness's own clients log nothing worth reading.
	ctrllog.SetLogger(logr.Discard())
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) {
	fmt.Printf("[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func sizes() ([]int, error) {
	spec := os.Getenv("BENCH_N")
	switch spec {
	case "":
		spec = "100,1000,5000"
	case "none":
		return nil, nil
	}
	var out []int
	for _, s := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("BENCH_N: %q is not a list of sizes such as 100,1000", spec)
		}
		out = append(out, n)
	}
	return out, nil
}

func runs() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_RUNS")); err == nil && n > 0 {
		return n
	}
	return 3
}

func run() error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	if testenv.InNodeNamespace() {
		// This program run again for the real-node figure (realNodeCase).
		return measureRealNode(context.Background(), runs())
	}
	if p := os.Getenv("BENCH_REPORT"); p != "" {
		// Only report a saved run.
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var res Results
		if err := json.Unmarshal(raw, &res); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		printTable(os.Stdout, res.Sizes)
		return writeDocs(filepath.Join(root, "docs", "benchmarks.md"), res)
	}
	if v := os.Getenv("BENCH_WRITE_COSTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("BENCH_WRITE_COSTS=%q: want a number of writes, e.g. 1000", v)
		}
		costs, err := writeCosts(context.Background(), n)
		if err != nil {
			return err
		}
		printWriteCosts(os.Stdout, costs)
		return nil
	}
	ns, err := sizes()
	if err != nil {
		return err
	}
	extra, err := extraLayouts()
	if err != nil {
		return err
	}
	bin := os.Getenv("TRAINOPS_BIN")
	if bin == "" {
		bin = filepath.Join(root, "bin", "trainops")
	}
	res := Results{Machine: machine(), Date: time.Now().UTC().Format("2006-01-02"), Runs: runs(),
		Command: command()}
	gitsyncs, each, err := gitSyncCase()
	if err != nil {
		return err
	}
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = filepath.Join(root, "bench")
	}
	// What this run does not measure is kept from the last run's results,
	// each size with its date.
	last := lastResults(filepath.Join(out, "results.json"))
	if len(ns) == 0 && last != nil {
		res.Machine, res.Date, res.Runs, res.Command = last.Machine, last.Date, last.Runs, last.Command
	}
	ctx := context.Background()
	for _, n := range ns {
		say("N = %d", n)
		f, err := measure(ctx, root, bin, n, res.Runs, extra)
		if err != nil {
			return fmt.Errorf("N=%d: %w", n, err)
		}
		f.Date, f.Machine = res.Date, res.Machine
		res.Sizes = append(res.Sizes, *f)
		printTable(os.Stdout, res.Sizes[len(res.Sizes)-1:])
	}
	res.Sizes = keptSizes(res.Sizes, last)
	if gitsyncs == 0 && last != nil {
		res.GitSyncs = last.GitSyncs
	}
	if gitsyncs > 0 {
		g, err := measureGitSyncs(ctx, root, bin, gitsyncs, each, runs())
		if err != nil {
			return fmt.Errorf("%d GitSyncs: %w", gitsyncs, err)
		}
		g.Date, g.Command = time.Now().UTC().Format("2006-01-02"), command()
		res.GitSyncs = g
	}
	if res.Krusty, err = krustyCase(ctx, root, last); err != nil {
		return err
	}
	if res.Kueue, err = kueueCase(ctx, last); err != nil {
		return err
	}
	if res.RealNode, err = realNodeCase(); err != nil {
		return err
	}
	if res.RealNode == nil && last != nil {
		res.RealNode = last.RealNode
	} else if res.RealNode != nil {
		res.RealNode.Date = time.Now().UTC().Format("2006-01-02")
	}
	fmt.Println()
	printTable(os.Stdout, res.Sizes)
	printGitSyncs(os.Stdout, res.GitSyncs)
	printKrusty(os.Stdout, res.Krusty)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(out, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if os.Getenv("BENCH_DOCS") != "0" {
		return writeDocs(filepath.Join(root, "docs", "benchmarks.md"), res)
	}
	return nil
}

// lastResults reads a saved results.json, or nil.
func lastResults(path string) *Results {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var last Results
	if json.Unmarshal(raw, &last) != nil {
		return nil
	}
	return &last
}

// keptSizes adds to measured the sizes of last that were not measured
// again, each dated (by last's date when it has none), in order of N.
func keptSizes(measured []Figures, last *Results) []Figures {
	if last == nil {
		return measured
	}
	for _, f := range last.Sizes {
		if slices.ContainsFunc(measured, func(m Figures) bool { return m.N == f.N }) {
			continue
		}
		if f.Date == "" {
			f.Date = last.Date
		}
		if f.Machine == "" {
			f.Machine = last.Machine
		}
		measured = append(measured, f)
	}
	slices.SortFunc(measured, func(a, b Figures) int { return a.N - b.N })
	return measured
}

// command is how to repeat this run.
func command() string {
	var env []string
	for _, k := range []string{"BENCH_N", "BENCH_RUNS", "BENCH_LAYOUTS", "BENCH_GITSYNCS"} {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return strings.Join(append(env, "make bench"), " ")
}

func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kb)
		mem = fmt.Sprintf(", %d GiB", (kb+512*1024)/(1024*1024))
	}
	return fmt.Sprintf("%d cores, %s%s, %s %s/%s", runtime.NumCPU(), cpu, mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// extraLayouts are the layouts BENCH_LAYOUTS names, besides the plain
// folder every run measures.
func extraLayouts() ([]benchrepo.Layout, error) {
	spec := os.Getenv("BENCH_LAYOUTS")
	switch spec {
	case "none":
		return nil, nil
	case "":
		return []benchrepo.Layout{benchrepo.Kustomization, benchrepo.Overlays}, nil
	}
	ls, err := benchrepo.ParseLayouts(spec)
	if err != nil {
		return nil, fmt.Errorf("BENCH_LAYOUTS: %w", err)
	}
	return slices.DeleteFunc(ls, func(l benchrepo.Layout) bool { return l == benchrepo.Plain }), nil
}
