// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/testenv"
)

const (
	inventoryNS = "trainops-system"
	hookSecret  = "bench-webhook-secret"
)

// bench holds one size's running parts.
type bench struct {
	n           int
	root        string
	bin         string
	dir         string
	env         *testenv.Env
	c           client.Client
	cs          *kubernetes.Clientset
	md          metadata.Interface
	git         *gitserver.Server
	repo        *gitserver.Repo
	repoName    string
	hookAddr    string
	metricsAddr string
	proc        *testenv.Process
	// anon is the highest anonymous memory of proc seen so far (KiB).
	anon   *atomic.Int64
	pyjobs int
	// layout is how the synced repository keeps its files.
	layout benchrepo.Layout
	// floorCost is what the last floor applied with applyFloor cost.
	floorCost phaseCost
}

// measure measures one size runs times, each on a fresh API server, etcd,
// Git server and trainops, and returns each figure's median (of ratios,
// each against its own run's floor).
func measure(ctx context.Context, root, bin string, n, runs int, extra []benchrepo.Layout) (*Figures, error) {
	var all []*Figures
	for i := range runs {
		if runs > 1 {
			say("  run %d of %d", i+1, runs)
		}
		f, err := measureOnce(ctx, root, bin, n, runs, extra)
		if err != nil {
			return nil, err
		}
		all = append(all, f)
	}
	return medianFigures(all), nil
}

// medianFigures is the median of each measured figure, each layout's too.
func medianFigures(all []*Figures) *Figures {
	out := *all[0]
	vs := make([]reflect.Value, len(all))
	for j, f := range all {
		vs[j] = reflect.ValueOf(f).Elem()
	}
	medianFields(reflect.ValueOf(&out).Elem(), vs)
	out.Layouts = slices.Clone(out.Layouts)
	for i := range out.Layouts {
		ls := make([]reflect.Value, len(all))
		for j, f := range all {
			ls[j] = reflect.ValueOf(&f.Layouts[i]).Elem()
		}
		medianFields(reflect.ValueOf(&out.Layouts[i]).Elem(), ls)
	}
	if len(all) > 1 {
		out.Runs = nil
		for _, f := range all {
			out.Runs = append(out.Runs, *f)
		}
	}
	return &out
}

// medianFields sets each float field of dst to its median over all.
func medianFields(dst reflect.Value, all []reflect.Value) {
	for i := range dst.NumField() {
		if dst.Field(i).Kind() != reflect.Float64 {
			continue
		}
		xs := make([]float64, len(all))
		for j, v := range all {
			xs[j] = v.Field(i).Float()
		}
		dst.Field(i).SetFloat(median(xs))
	}
}

// measureOnce measures one size once, on its own control plane.
func measureOnce(ctx context.Context, root, bin string, n, runs int, extra []benchrepo.Layout) (f *Figures, err error) {
	b := &bench{n: n, root: root, bin: bin, layout: benchrepo.Plain}
	if b.dir, err = os.MkdirTemp("", "trainops-bench-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(b.dir)
	if os.Getenv("BENCH_DEBUG") != "" {
		// Keep trainops's log for a look after the run.
		defer func() {
			if raw, err := os.ReadFile(filepath.Join(b.dir, "trainops.log")); err == nil {
				out := filepath.Join(os.TempDir(), fmt.Sprintf("trainops-bench-%d.log", n))
				if os.WriteFile(out, raw, 0o600) == nil {
					say("  trainops's log: %s", out)
				}
			}
		}()
	}
	// The floors and trainops each get a control plane of their own.
	if err := b.controlPlane(ctx, false); err != nil {
		return nil, err
	}
	defer func() { b.env.Stop() }()
	if b.git, err = gitserver.Start("", ""); err != nil {
		return nil, err
	}
	defer b.git.Stop()
	defer func() {
		if b.repo != nil {
			b.repo.Close()
		}
	}()
	f = &Figures{N: n}

	// The repository: mostly PyJobs, some SREAgents, one ClusterPolicy.
	objs := benchrepo.Generate(n, "bench")
	for _, o := range objs {
		if o.Kind == "PyJob" {
			b.pyjobs++
		}
	}

	// Render, on the generated files.
	genDir := filepath.Join(b.dir, "render")
	if err := benchrepo.Write(genDir, objs, benchrepo.Plain); err != nil {
		return nil, err
	}
	if err := b.renderFigures(genDir, ".", objs, runs, f); err != nil {
		return nil, err
	}
	floors := os.Getenv("BENCH_FLOORS") != "0"
	if floors {
		if err := b.floors(ctx, f); err != nil {
			return nil, err
		}
		// The children, on a fresh full control plane: trainops syncs the
		// whole repository, and from every object applied on its
		// reconcilers make the children while the Job controller makes
		// their pods.
		if err := b.children(ctx, objs, f); err != nil {
			return nil, err
		}
	}

	// Everything else, in API mode as the cold floor was: a fresh control
	// plane, as the floor had (one that holds the floors' tens of thousands
	// of writes is slower for every later write, see docs/design.md),
	// and trainops with its default settings on a repository that starts
	// with one namespace. The cold floor is measured right before.
	if floors {
		if f.ColdFloorSeconds, err = b.coldFloor(ctx); err != nil {
			return nil, err
		}
		f.FloorAPIServerCPU, f.FloorClientCPU, f.FloorRequests = b.floorCost.apiServerCPU, b.floorCost.clientCPU, b.floorCost.requests
	}
	if err := b.controlPlane(ctx, false); err != nil {
		return nil, err
	}
	if err := b.seed(ctx, "bench.git"); err != nil {
		return nil, err
	}
	defer b.stop()
	stopHeap := func() {}
	if p := os.Getenv("BENCH_HEAP_PEAK"); p != "" {
		stopHeap = b.heapAtPeak(p)
		defer stopHeap()
	}

	steps := []func() error{
		func() error { return b.coldSync(ctx, objs, f) },
		func() error { b.debugMemory("cold sync and children"); return b.noopResync(ctx, runs, f) },
		func() error { b.debugMemory("no-op re-sync"); return b.driftRepair(ctx, runs, f) },
		func() error { b.debugMemory("drift repair"); return b.pushToApplied(ctx, runs, f) },
		func() error { b.debugMemory("push"); return b.offlineDiff(runs, f) },
		func() error {
			f.PeakRSSMiB, f.CPUSeconds = usage(b.proc.Pid())
			f.PeakAnonMiB = float64(b.anon.Load()) / 1024
			if p := os.Getenv("BENCH_HEAP"); p != "" {
				download("http://"+b.metricsAddr+"/debug/pprof/heap?gc=1", p)
			}
			return nil
		},
		func() error { return b.startup(ctx, f) },
		func() error {
			if !floors {
				return nil
			}
			return b.coldStart(ctx, f)
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	stopHeap()
	for _, l := range extra {
		lf, err := b.layoutFigures(ctx, l, objs, runs, floors)
		if err != nil {
			return nil, fmt.Errorf("layout %s: %w", l, err)
		}
		f.Layouts = append(f.Layouts, *lf)
	}
	return f, nil
}

// seed makes repository name with one namespace, starts trainops on it and
// waits for its first sync.
func (b *bench) seed(ctx context.Context, name string) (err error) {
	if b.repo != nil {
		b.repo.Close()
	}
	if b.repo, err = b.git.NewRepo(name, "main", ""); err != nil {
		return err
	}
	if err := benchrepo.Write(b.repo.Dir, []benchrepo.Object{benchrepo.SeedObject()}, b.layout); err != nil {
		return err
	}
	if _, err := b.repo.CommitAndPush("seed"); err != nil {
		return err
	}
	b.repoName = name
	if err := b.start(); err != nil {
		return err
	}
	_, err = b.waitSynced(ctx, "", time.Time{}, 2*time.Minute)
	return err
}

// pushAll commits every object to the repository and pushes it.
func (b *bench) pushAll(objs []benchrepo.Object) (string, error) {
	if err := benchrepo.Write(b.repo.Dir, slices.Concat(objs, []benchrepo.Object{benchrepo.SeedObject()}), b.layout); err != nil {
		return "", err
	}
	return b.repo.CommitAndPush("everything")
}

// sayApplied prints what trainops's log says the sync of rev applied.
func (b *bench) sayApplied(rev string) (phases map[string]float64) {
	_ = poll(5*time.Second, func() (bool, error) {
		line := lastLogLine(filepath.Join(b.dir, "trainops.log"), rev)
		if strings.Contains(line, "Reconcile finished") {
			say("  %s", line[strings.Index(line, `"applied"`):])
			phases = syncPhases(line)
			return true, nil
		}
		return false, nil
	})
	return phases
}

// syncPhases reads the seconds of each phase from a sync's log line
// ("phases":"fetch=80ms render=71ms …"); nil when it has none.
func syncPhases(line string) map[string]float64 {
	_, rest, ok := strings.Cut(line, `"phases":"`)
	if !ok {
		return nil
	}
	rest, _, _ = strings.Cut(rest, `"`)
	out := map[string]float64{}
	for _, p := range strings.Fields(rest) {
		name, v, ok := strings.Cut(p, "=")
		if d, err := time.ParseDuration(v); ok && err == nil {
			out[name] += d.Seconds()
		}
	}
	return out
}

// children measures, on a fresh full control plane, from every object of
// a cold sync applied to every PyJob's Job (f.ChildrenSeconds) and to every
// PyJob's status (f.StatusSeconds).
func (b *bench) children(ctx context.Context, objs []benchrepo.Object, f *Figures) error {
	if err := b.controlPlane(ctx, true); err != nil {
		return err
	}
	if err := b.seed(ctx, "children.git"); err != nil {
		return err
	}
	defer b.stop()
	rev, err := b.pushAll(objs)
	if err != nil {
		return err
	}
	if _, err := b.settled(ctx); err != nil {
		return err
	}
	hooked := time.Now()
	if err := b.hook(); err != nil {
		return err
	}
	if _, err := b.waitSynced(ctx, rev, time.Time{}, 10*time.Minute); err != nil {
		return err
	}
	synced := time.Now()
	syncedBy, _ := b.requestsBy(ctx)
	syncedCPU := b.cpu()
	say("  children: %d Jobs, with the Job controller and GPU nodes running", b.pyjobs)
	if p := os.Getenv("BENCH_APISERVER_PROFILE"); p != "" {
		go b.apiserverProfile(ctx, p, 5)
	}
	if p := os.Getenv("BENCH_PROFILE_CHILDREN"); p != "" {
		go profile(b.metricsAddr, p)
	}
	if err := b.waitJobs(ctx, 10*time.Minute); err != nil {
		return err
	}
	f.ChildrenSeconds = time.Since(synced).Seconds()
	f.PushJobsSeconds = time.Since(hooked).Seconds()
	childrenCPU := b.cpu()
	childrenBy, _ := b.requestsBy(ctx)
	b.debugRequests("children", syncedBy, childrenBy)
	b.debugCPU("children", syncedCPU, childrenCPU)
	c := costOf(syncedCPU, childrenCPU, syncedBy, childrenBy, "trainops")
	f.ChildrenAPIServerCPU, f.ChildrenControllersCPU, f.ChildrenClientCPU, f.ChildrenRequests = c.apiServerCPU, c.controllersCPU, c.clientCPU, c.requests
	f.ChildrenRatio = ratio(f.ChildrenSeconds, f.ChildrenFloor)
	// Then every PyJob's status: the rest of the children's writes.
	if err := b.waitStatuses(ctx, 10*time.Minute); err != nil {
		return err
	}
	f.StatusSeconds = time.Since(synced).Seconds()
	statusBy, _ := b.requestsBy(ctx)
	b.debugRequests("statuses", childrenBy, statusBy)
	f.WritesRatio = ratio(f.StatusSeconds, f.WritesFloor)
	return nil
}

// ratio is a/floor, or 0 when no floor was measured (BENCH_FLOORS=0).
func ratio(a, floor float64) float64 {
	if floor == 0 {
		return 0
	}
	return a / floor
}
