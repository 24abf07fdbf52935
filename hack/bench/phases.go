// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/render"
)

// The phases of one run, in the order measureOnce runs them. Each fills
// its figures in f.

// renderFigures times rendering path of the generated files in genDir,
// runs times.
func (b *bench) renderFigures(genDir, path string, objs []benchrepo.Object, runs int, f *Figures) error {
	var rs []float64
	for i := 0; i < runs; i++ {
		t := time.Now()
		if _, err := render.Render(genDir, path); err != nil {
			return err
		}
		rs = append(rs, time.Since(t).Seconds())
	}
	f.RenderSeconds = median(rs)
	f.RenderPerObjectUs = f.RenderSeconds / float64(len(objs)) * 1e6
	return nil
}

// coldFloor is the cold sync's floor, measured right before the cold sync
// it is the floor of, so that both meet the machine in the same state: a
// plain client applying the same objects (in their own namespaces) with
// server-side apply from 16 goroutines, on a fresh control plane of its
// own. The control plane is left for the caller to replace.
func (b *bench) coldFloor(ctx context.Context) (float64, error) {
	if err := b.controlPlane(ctx, false); err != nil {
		return 0, err
	}
	return b.applyFloor(ctx, benchrepo.Generate(b.n, "floor"))
}

// syncProfileSeconds is how long kube-apiserver is profiled from the start
// of the floor's apply and of the cold sync (BENCH_APISERVER_PROFILE_SYNC):
// the same window from each start, within both.
const syncProfileSeconds = 2

// applyFloor applies objs as the floor does and returns how long it took.
func (b *bench) applyFloor(ctx context.Context, objs []benchrepo.Object) (float64, error) {
	say("  floor: plain server-side apply of %d objects from 16 goroutines", len(objs))
	// From the same quiet as trainops's cold sync: an API server that has
	// been idle for a second is slower to take a burst than one that has
	// just started.
	if _, err := b.settled(ctx); err != nil {
		return 0, err
	}
	stopWatch, err := floorWatch(ctx, b.env.Config)
	if err != nil {
		return 0, err
	}
	if stopWatch != nil {
		defer stopWatch()
	}
	reqs, _ := b.requestsBy(ctx)
	cpu := b.cpu()
	if p := os.Getenv("BENCH_APISERVER_PROFILE_SYNC"); p != "" {
		go b.apiserverProfile(ctx, p+".floor", syncProfileSeconds)
	}
	t := time.Now()
	if err := plainApply(ctx, b.c, objs); err != nil {
		return 0, err
	}
	secs := time.Since(t).Seconds()
	after := b.cpu()
	afterReqs, _ := b.requestsBy(ctx)
	b.debugCPU("floor", cpu, after)
	b.floorCost = costOf(cpu, after, reqs, afterReqs, "harness")
	return secs, nil
}

// floors measures what a plain client takes for the children's work: the
// Jobs, and every other write a new PyJob needs (the cold apply's floor is
// coldFloor's).
func (b *bench) floors(ctx context.Context, f *Figures) error {
	// The objects whose children the floors make, applied by a plain
	// client (the cold sync's floor is measured next to each cold sync, see
	// coldFloor).
	floorObjs := benchrepo.Generate(b.n, "floor")
	if _, err := b.applyFloor(ctx, floorObjs); err != nil {
		return err
	}
	var floorJobs []client.Object
	var floorPyJobs []*trainingv1alpha1.PyJob
	for _, o := range floorObjs {
		if o.Kind == "PyJob" {
			pj := &trainingv1alpha1.PyJob{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.U.Object, pj); err != nil {
				return err
			}
			job, err := jobOf(pj)
			if err != nil {
				return err
			}
			floorJobs = append(floorJobs, job)
			floorPyJobs = append(floorPyJobs, pj)
		}
	}
	// The children are measured where pods are made: the same cluster gets
	// kube-controller-manager, kube-scheduler and kwok's GPU nodes, so the
	// Job controller makes every Job's pods while the Jobs are created.
	say("  floor: %d Jobs, with the Job controller and GPU nodes running", len(floorJobs))
	if err := b.env.StartFull(ctx, testenv.Options{}); err != nil {
		return err
	}
	if _, err := b.settled(ctx); err != nil {
		return err
	}
	jobsCPU := b.cpu()
	jobsBy, _ := b.requestsBy(ctx)
	if p := os.Getenv("BENCH_APISERVER_PROFILE"); p != "" {
		go b.apiserverProfile(ctx, p+".floor", 5)
	}
	t := time.Now()
	if err := createTyped(ctx, b.c, floorJobs); err != nil {
		return err
	}
	f.ChildrenFloor = time.Since(t).Seconds()
	jobsDone := b.cpu()
	b.debugCPU("floor Jobs", jobsCPU, jobsDone)
	if after, err := b.requestsBy(ctx); err == nil {
		b.debugRequests("floor Jobs", jobsBy, after)
		c := costOf(jobsCPU, jobsDone, jobsBy, after, "harness")
		f.JobsFloorAPIServerCPU, f.JobsFloorControllersCPU, f.JobsFloorClientCPU, f.JobsFloorRequests = c.apiServerCPU, c.controllersCPU, c.clientCPU, c.requests
	}
	// The writes floor: the rest of what each PyJob needs (its headless
	// Service, its first status, its Created Event) written by a plain
	// client the same way; with the Jobs, the least work the API server
	// must do for the children.
	say("  floor: the other writes of %d PyJobs", len(floorPyJobs))
	t = time.Now()
	if err := b.otherWrites(ctx, floorPyJobs); err != nil {
		return err
	}
	f.WritesFloor = f.ChildrenFloor + time.Since(t).Seconds()

	return nil
}

// coldSync pushes the whole repository and times webhook → every object
// applied, then waits for the reconcilers to finish their children.
func (b *bench) coldSync(ctx context.Context, objs []benchrepo.Object, f *Figures) error {
	// Cold sync: push the whole repository, call the webhook, wait for
	// every object applied.
	say("  cold sync of %d objects", len(objs))
	rev, err := b.pushAll(objs)
	if err != nil {
		return err
	}
	if _, err := b.settled(ctx); err != nil {
		return err
	}
	coldBefore, _ := b.requestsBy(ctx)
	coldCPU := b.cpu()
	t := time.Now()
	if err := b.hook(); err != nil {
		return err
	}
	if p := os.Getenv("BENCH_PROFILE"); p != "" {
		go profile(b.metricsAddr, p)
	}
	if p := os.Getenv("BENCH_APISERVER_PROFILE_SYNC"); p != "" {
		go b.apiserverProfile(ctx, p, syncProfileSeconds)
	}
	if _, err := b.waitSynced(ctx, rev, time.Time{}, 10*time.Minute); err != nil {
		return err
	}
	f.ColdSyncSeconds = time.Since(t).Seconds()
	syncedBy, _ := b.requestsBy(ctx)
	syncedCPU := b.cpu()
	b.debugRequests("cold sync", coldBefore, syncedBy)
	b.debugCPU("cold sync", coldCPU, syncedCPU)
	cost := costOf(coldCPU, syncedCPU, coldBefore, syncedBy, "trainops")
	f.ColdAPIServerCPU, f.ColdClientCPU, f.ColdRequests = cost.apiServerCPU, cost.clientCPU, cost.requests
	// The sync's own account: its work before the first apply (fetch,
	// render, plan, validation), and its applies.
	if phases := b.sayApplied(rev); phases != nil {
		f.ColdApply = phases["apply"]
		f.ColdBeforeApply = phases["fetch"] + phases["render"] + phases["plan"] + phases["dryRun"]
	}
	f.ColdRatio = ratio(f.ColdSyncSeconds, f.ColdFloorSeconds)
	// The reconcilers make the children here too; the figures below start
	// once they are done.
	if err := b.waitJobs(ctx, 10*time.Minute); err != nil {
		return err
	}
	if err := b.waitStatuses(ctx, 10*time.Minute); err != nil {
		return err
	}
	inv, err := gitops.ReadInventory(ctx, b.c, inventoryNS, gitops.DefaultName)
	if err != nil {
		return err
	}
	f.Kinds = len(inv.Counts())

	return nil
}

// noopResync times a sync with nothing changed and counts its requests.
func (b *bench) noopResync(ctx context.Context, runs int, f *Figures) error {
	// No-op re-sync: nothing changed; count API requests from the API
	// server's own metrics.
	say("  no-op re-sync")
	var secs, reqs []float64
	for i := 0; i < runs; i++ {
		// Let the reconcilers' writes settle, so only the sync is counted.
		before, err := b.settled(ctx)
		if err != nil {
			return err
		}
		beforeBy, _ := b.requestsBy(ctx)
		// Watch trainops's own metrics for the sync to end, so the harness
		// adds no request to the count.
		count, err := b.syncCount()
		if err != nil {
			return err
		}
		t := time.Now()
		if err := b.hook(); err != nil {
			return err
		}
		if err := poll(time.Minute, func() (bool, error) {
			n, err := b.syncCount()
			return n > count, err
		}); err != nil {
			return err
		}
		secs = append(secs, time.Since(t).Seconds())
		afterBy, _ := b.requestsBy(ctx)
		after, err := b.requests(ctx)
		if err != nil {
			return err
		}
		reqs = append(reqs, after-before)
		b.debugRequests("no-op re-sync", beforeBy, afterBy)
	}
	f.NoopSeconds, f.NoopRequests = median(secs), median(reqs)
	f.NoopPerKind = f.NoopRequests / float64(max(f.Kinds, 1))

	return nil
}

// driftRepair times a PyJob suspended by hand being put back by a sync.
func (b *bench) driftRepair(ctx context.Context, runs int, f *Figures) error {
	// Drift repair: one PyJob suspended by hand is put back by a sync.
	say("  drift repair")
	var secs []float64
	for i := 0; i < runs; i++ {
		key := client.ObjectKey{Namespace: "bench-0", Name: fmt.Sprintf("job-%05d", i)}
		pj := &trainingv1alpha1.PyJob{}
		if err := b.c.Get(ctx, key, pj); err != nil {
			return err
		}
		pj.Spec.Suspend = ptr.To(true)
		if err := b.c.Update(ctx, pj, client.FieldOwner("kubectl-edit")); err != nil {
			return err
		}
		t := time.Now()
		if err := b.hook(); err != nil {
			return err
		}
		if err := poll(time.Minute, func() (bool, error) {
			if err := b.c.Get(ctx, key, pj); err != nil {
				return false, err
			}
			return !ptr.Deref(pj.Spec.Suspend, false), nil
		}); err != nil {
			return fmt.Errorf("drift not repaired: %w", err)
		}
		secs = append(secs, time.Since(t).Seconds())
	}
	f.DriftSeconds = median(secs)

	return nil
}

// pushToApplied times a one-file change, webhook → the object exists.
func (b *bench) pushToApplied(ctx context.Context, runs int, f *Figures) error {
	// Push to applied: a one-file change through the webhook.
	say("  push -> applied")
	var secs []float64
	for i := 0; i < max(runs, 5); i++ {
		name := fmt.Sprintf("pushed-%d", i)
		if err := benchrepo.Add(b.repo.Dir, benchrepo.NewPyJob("bench-0", name), b.layout); err != nil {
			return err
		}
		if _, err := b.repo.CommitAndPush(name); err != nil {
			return err
		}
		t := time.Now()
		if err := b.hook(); err != nil {
			return err
		}
		if err := poll(time.Minute, func() (bool, error) {
			err := b.c.Get(ctx, client.ObjectKey{Namespace: "bench-0", Name: name}, &trainingv1alpha1.PyJob{})
			return err == nil, client.IgnoreNotFound(err)
		}); err != nil {
			return err
		}
		secs = append(secs, time.Since(t).Seconds())
	}
	f.PushSeconds = median(secs)

	return nil
}

// offlineDiff times `trainops diff` of the last two commits.
func (b *bench) offlineDiff(runs int, f *Figures) error {
	// Offline diff of the last two commits (one file apart).
	say("  offline diff")
	var secs []float64
	for i := 0; i < runs; i++ {
		cmd := exec.Command(b.bin, "diff", "--repo", b.repo.Dir, "--path", b.layout.Path(), "--base", "HEAD~1", "--head", "HEAD", "-o", "json")
		t := time.Now()
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 1 {
			return fmt.Errorf("offline diff exited %d (want 1, changes): %v %s", code, err, out)
		}
		secs = append(secs, time.Since(t).Seconds())
	}
	f.DiffSeconds = median(secs)

	return nil
}

// startup times a new process to its first (no-op) sync done.
func (b *bench) startup(ctx context.Context, f *Figures) error {
	// Start-up: a new process, to its first (no-op) sync done.
	say("  start-up")
	b.stop()
	t := time.Now()
	if err := b.start(); err != nil {
		return err
	}
	// A sync that finds nothing to do writes nothing: the new process's
	// own metrics say when its first sync is done (until it listens,
	// there is none).
	if err := poll(5*time.Minute, func() (bool, error) {
		n, err := b.syncCount()
		return err == nil && n >= 1, nil
	}); err != nil {
		return err
	}
	f.StartupSeconds = time.Since(t).Seconds()
	return nil
}

// layoutFigures measures, on a fresh control plane, what depends on how
// the repository keeps the same objects: render, cold sync (against a
// floor measured right before it), no-op re-sync, push → applied, offline
// diff and memory.
func (b *bench) layoutFigures(ctx context.Context, l benchrepo.Layout, objs []benchrepo.Object, runs int, floors bool) (*LayoutFigures, error) {
	say("  layout %s", l)
	genDir := filepath.Join(b.dir, "render-"+string(l))
	if err := benchrepo.Write(genDir, objs, l); err != nil {
		return nil, err
	}
	// The render meets a quiet machine, as the plain layout's does: the
	// previous layout's trainops and control plane are stopped first, not
	// left reconciling beside it.
	b.stop()
	b.env.Stop()
	f := &Figures{N: b.n}
	if err := b.renderFigures(genDir, l.Path(), objs, runs, f); err != nil {
		return nil, err
	}
	b.layout = l
	if floors {
		var err error
		if f.ColdFloorSeconds, err = b.coldFloor(ctx); err != nil {
			return nil, err
		}
	}
	if err := b.controlPlane(ctx, false); err != nil {
		return nil, err
	}
	if err := b.seed(ctx, "bench-"+string(l)+".git"); err != nil {
		return nil, err
	}
	defer b.stop()
	if p := os.Getenv("BENCH_HEAP_PEAK"); p != "" {
		defer b.heapAtPeak(p + "-" + string(l))()
	}
	for _, step := range []func() error{
		func() error { return b.coldSync(ctx, objs, f) },
		func() error { return b.noopResync(ctx, runs, f) },
		func() error { return b.pushToApplied(ctx, runs, f) },
		func() error { return b.offlineDiff(runs, f) },
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	f.PeakRSSMiB, _ = usage(b.proc.Pid())
	f.PeakAnonMiB = float64(b.anon.Load()) / 1024
	return &LayoutFigures{Layout: string(l), RenderSeconds: f.RenderSeconds, RenderPerObjectUs: f.RenderPerObjectUs,
		ColdSyncSeconds: f.ColdSyncSeconds, ColdFloorSeconds: f.ColdFloorSeconds, ColdRatio: f.ColdRatio, NoopSeconds: f.NoopSeconds, NoopRequests: f.NoopRequests,
		PushSeconds: f.PushSeconds, DiffSeconds: f.DiffSeconds, PeakRSSMiB: f.PeakRSSMiB, PeakAnonMiB: f.PeakAnonMiB}, nil
}

// coldStart times a new process on a fresh control plane, its repository
// already holding every object and its Git cache empty: from process start
// to every object applied, against a floor measured right before on a
// fresh control plane of its own.
func (b *bench) coldStart(ctx context.Context, f *Figures) error {
	say("  cold start")
	b.stop()
	floor, err := b.coldFloor(ctx)
	if err != nil {
		return err
	}
	if err := b.controlPlane(ctx, false); err != nil {
		return err
	}
	rev, err := b.repo.CommitEmptyAndPush("cold start")
	if err != nil {
		return err
	}
	if _, err := b.settled(ctx); err != nil {
		return err
	}
	cache, err := os.MkdirTemp(b.dir, "cold-start-")
	if err != nil {
		return err
	}
	t := time.Now()
	if err := b.startIn(cache); err != nil {
		return err
	}
	if _, err := b.waitSynced(ctx, rev, time.Time{}, 10*time.Minute); err != nil {
		return err
	}
	f.ColdStartSeconds, f.ColdStartFloor = time.Since(t).Seconds(), floor
	f.ColdStartRatio = ratio(f.ColdStartSeconds, floor)
	b.sayApplied(rev)
	return nil
}
