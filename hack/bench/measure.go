package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/app"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/render"
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
	proc        *exec.Cmd
	pyjobs      int
}

// measure measures one size runs times, each on a fresh API server, etcd,
// Git server and trainops, and returns each figure's median (of ratios,
// each against its own run's floor).
func measure(ctx context.Context, root, bin string, n, runs int) (*Figures, error) {
	var all []*Figures
	for i := range runs {
		if runs > 1 {
			say("  run %d of %d", i+1, runs)
		}
		f, err := measureOnce(ctx, root, bin, n, runs)
		if err != nil {
			return nil, err
		}
		all = append(all, f)
	}
	return medianFigures(all), nil
}

// medianFigures is the median of each measured figure.
func medianFigures(all []*Figures) *Figures {
	out := *all[0]
	v := reflect.ValueOf(&out).Elem()
	for i := range v.NumField() {
		if v.Field(i).Kind() != reflect.Float64 {
			continue
		}
		xs := make([]float64, len(all))
		for j, f := range all {
			xs[j] = reflect.ValueOf(f).Elem().Field(i).Float()
		}
		v.Field(i).SetFloat(median(xs))
	}
	return &out
}

// measureOnce measures one size once, on its own control plane.
func measureOnce(ctx context.Context, root, bin string, n, runs int) (f *Figures, err error) {
	b := &bench{n: n, root: root, bin: bin}
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
	objs := generate(n, "bench")
	for _, o := range objs {
		if o.kind == "PyJob" {
			b.pyjobs++
		}
	}

	// Render, on the generated files.
	genDir := filepath.Join(b.dir, "render")
	if err := writeObjects(genDir, objs); err != nil {
		return nil, err
	}
	var rs []float64
	for i := 0; i < runs; i++ {
		t := time.Now()
		if _, err := render.Render(genDir, "."); err != nil {
			return nil, err
		}
		rs = append(rs, time.Since(t).Seconds())
	}
	f.RenderSeconds = median(rs)
	f.RenderPerObjectUs = f.RenderSeconds / float64(len(objs)) * 1e6

	// The floor: a plain client applying the same objects (in their own
	// namespaces) with server-side apply from 16 goroutines.
	say("  floor: plain server-side apply of %d objects from 16 goroutines", len(objs))
	floorObjs := generate(n, "floor")
	// From the same quiet as trainops's cold sync: an API server that has
	// been idle for a second is slower to take a burst than one that has
	// just started.
	if _, err := b.settled(ctx); err != nil {
		return nil, err
	}
	floorCPU := b.cpu()
	t := time.Now()
	if err := plainApply(ctx, b.c, floorObjs); err != nil {
		return nil, err
	}
	f.ColdFloorSeconds = time.Since(t).Seconds()
	b.debugCPU("floor", floorCPU, b.cpu())
	var floorJobs []client.Object
	var floorPyJobs []*trainingv1alpha1.PyJob
	for _, o := range floorObjs {
		if o.kind == "PyJob" {
			pj := &trainingv1alpha1.PyJob{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.u.Object, pj); err != nil {
				return nil, err
			}
			floorJobs = append(floorJobs, jobOf(pj))
			floorPyJobs = append(floorPyJobs, pj)
		}
	}
	// The children are measured where pods are made: the same cluster gets
	// kube-controller-manager, kube-scheduler and kwok's GPU nodes, so the
	// Job controller makes every Job's pods while the Jobs are created.
	say("  floor: %d Jobs, with the Job controller and GPU nodes running", len(floorJobs))
	if err := b.env.StartFull(ctx, testenv.Options{}); err != nil {
		return nil, err
	}
	if _, err := b.settled(ctx); err != nil {
		return nil, err
	}
	t = time.Now()
	if err := createTyped(ctx, b.c, floorJobs); err != nil {
		return nil, err
	}
	f.ChildrenFloor = time.Since(t).Seconds()
	// The writes floor: the rest of what each PyJob needs (its headless
	// Service, its first status, its Created Event) written by a plain
	// client the same way; with the Jobs, the least work the API server
	// must do for the children.
	say("  floor: the other writes of %d PyJobs", len(floorPyJobs))
	t = time.Now()
	if err := b.otherWrites(ctx, floorPyJobs); err != nil {
		return nil, err
	}
	f.WritesFloor = f.ChildrenFloor + time.Since(t).Seconds()

	// The children, on a fresh full control plane: trainops syncs the
	// whole repository, and from every object applied on its reconcilers
	// make the children while the Job controller makes their pods.
	if err := b.children(ctx, objs, f); err != nil {
		return nil, err
	}

	// Everything else, in API mode as the cold floor was: a fresh control
	// plane, as the floor had (one that holds the floors' tens of thousands
	// of writes is slower for every later write, see docs/performance.md),
	// and trainops with its default settings on a repository that starts
	// with one namespace.
	if err := b.controlPlane(ctx, false); err != nil {
		return nil, err
	}
	if err := b.seed(ctx, "bench.git"); err != nil {
		return nil, err
	}
	defer b.stop()

	// Cold sync: push the whole repository, call the webhook, wait for
	// every object applied.
	say("  cold sync of %d objects", len(objs))
	rev, err := b.pushAll(objs)
	if err != nil {
		return nil, err
	}
	if _, err := b.settled(ctx); err != nil {
		return nil, err
	}
	coldBefore, _ := b.requestsBy(ctx)
	coldCPU := b.cpu()
	t = time.Now()
	if err := b.hook(); err != nil {
		return nil, err
	}
	if p := os.Getenv("BENCH_PROFILE"); p != "" {
		go profile(b.metricsAddr, p)
	}
	if _, err := b.waitSynced(ctx, rev, time.Time{}, 10*time.Minute); err != nil {
		return nil, err
	}
	f.ColdSyncSeconds = time.Since(t).Seconds()
	syncedBy, _ := b.requestsBy(ctx)
	b.debugRequests("cold sync", coldBefore, syncedBy)
	b.debugCPU("cold sync", coldCPU, b.cpu())
	b.sayApplied(rev)
	f.ColdRatio = f.ColdSyncSeconds / f.ColdFloorSeconds
	// The reconcilers make the children here too; the figures below start
	// once they are done.
	if err := b.waitJobs(ctx, 10*time.Minute); err != nil {
		return nil, err
	}
	if err := b.waitStatuses(ctx, 10*time.Minute); err != nil {
		return nil, err
	}
	inv, err := gitops.ReadInventory(ctx, b.c, inventoryNS, app.SyncName)
	if err != nil {
		return nil, err
	}
	f.Kinds = len(inv.Counts())

	// No-op re-sync: nothing changed; count API requests from the API
	// server's own metrics.
	say("  no-op re-sync")
	var secs, reqs []float64
	for i := 0; i < runs; i++ {
		// Let the reconcilers' writes settle, so only the sync is counted.
		before, err := b.settled(ctx)
		if err != nil {
			return nil, err
		}
		beforeBy, _ := b.requestsBy(ctx)
		// Watch trainops's own metrics for the sync to end, so the harness
		// adds no request to the count.
		count, err := b.syncCount()
		if err != nil {
			return nil, err
		}
		t := time.Now()
		if err := b.hook(); err != nil {
			return nil, err
		}
		if err := poll(time.Minute, func() (bool, error) {
			n, err := b.syncCount()
			return n > count, err
		}); err != nil {
			return nil, err
		}
		secs = append(secs, time.Since(t).Seconds())
		afterBy, _ := b.requestsBy(ctx)
		after, err := b.requests(ctx)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, after-before)
		b.debugRequests("no-op re-sync", beforeBy, afterBy)
	}
	f.NoopSeconds, f.NoopRequests = median(secs), median(reqs)
	f.NoopPerKind = f.NoopRequests / float64(max(f.Kinds, 1))

	// Drift repair: one PyJob suspended by hand is put back by a sync.
	say("  drift repair")
	secs = nil
	for i := 0; i < runs; i++ {
		key := client.ObjectKey{Namespace: "bench-0", Name: fmt.Sprintf("job-%05d", i)}
		pj := &trainingv1alpha1.PyJob{}
		if err := b.c.Get(ctx, key, pj); err != nil {
			return nil, err
		}
		pj.Spec.Suspend = ptr.To(true)
		if err := b.c.Update(ctx, pj, client.FieldOwner("kubectl-edit")); err != nil {
			return nil, err
		}
		t := time.Now()
		if err := b.hook(); err != nil {
			return nil, err
		}
		if err := poll(time.Minute, func() (bool, error) {
			if err := b.c.Get(ctx, key, pj); err != nil {
				return false, err
			}
			return !ptr.Deref(pj.Spec.Suspend, false), nil
		}); err != nil {
			return nil, fmt.Errorf("drift not repaired: %w", err)
		}
		secs = append(secs, time.Since(t).Seconds())
	}
	f.DriftSeconds = median(secs)

	// Push to applied: a one-file change through the webhook.
	say("  push -> applied")
	secs = nil
	for i := 0; i < max(runs, 5); i++ {
		name := fmt.Sprintf("pushed-%d", i)
		if err := b.repo.Write("jobs/"+name+".yaml", pyjobYAML("bench-0", name)); err != nil {
			return nil, err
		}
		if _, err := b.repo.CommitAndPush(name); err != nil {
			return nil, err
		}
		t := time.Now()
		if err := b.hook(); err != nil {
			return nil, err
		}
		if err := poll(time.Minute, func() (bool, error) {
			err := b.c.Get(ctx, client.ObjectKey{Namespace: "bench-0", Name: name}, &trainingv1alpha1.PyJob{})
			return err == nil, client.IgnoreNotFound(err)
		}); err != nil {
			return nil, err
		}
		secs = append(secs, time.Since(t).Seconds())
	}
	f.PushSeconds = median(secs)

	// Offline diff of the last two commits (one file apart).
	say("  offline diff")
	secs = nil
	for i := 0; i < runs; i++ {
		cmd := exec.Command(b.bin, "diff", "--repo", b.repo.Dir, "--base", "HEAD~1", "--head", "HEAD", "-o", "json")
		t := time.Now()
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 1 {
			return nil, fmt.Errorf("offline diff exited %d (want 1, changes): %v %s", code, err, out)
		}
		secs = append(secs, time.Since(t).Seconds())
	}
	f.DiffSeconds = median(secs)

	f.PeakRSSMiB, f.CPUSeconds = usage(b.proc.Process.Pid)
	if p := os.Getenv("BENCH_HEAP"); p != "" {
		download("http://"+b.metricsAddr+"/debug/pprof/heap?gc=1", p)
	}

	// Start-up: a new process, to its first (no-op) sync done.
	say("  start-up")
	b.stop()
	t = time.Now()
	if err := b.start(); err != nil {
		return nil, err
	}
	if _, err := b.waitSynced(ctx, "", t, 5*time.Minute); err != nil {
		return nil, err
	}
	f.StartupSeconds = time.Since(t).Seconds()
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
	if err := b.repo.Write("seed.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: bench-seed\n"); err != nil {
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
func (b *bench) pushAll(objs []object) (string, error) {
	if err := writeObjects(b.repo.Dir, objs); err != nil {
		return "", err
	}
	return b.repo.CommitAndPush("everything")
}

// sayApplied prints what trainops's log says the sync of rev applied.
func (b *bench) sayApplied(rev string) {
	_ = poll(5*time.Second, func() (bool, error) {
		line := lastLogLine(filepath.Join(b.dir, "trainops.log"), rev)
		if strings.Contains(line, "Reconcile finished") {
			say("  %s", line[strings.Index(line, `"applied"`):])
			return true, nil
		}
		return false, nil
	})
}

// children measures, on a fresh full control plane, from every object of
// a cold sync applied to every PyJob's Job (f.ChildrenSeconds) and to every
// PyJob's status (f.StatusSeconds).
func (b *bench) children(ctx context.Context, objs []object, f *Figures) error {
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
		go b.apiserverProfile(ctx, p)
	}
	if err := b.waitJobs(ctx, 10*time.Minute); err != nil {
		return err
	}
	f.ChildrenSeconds = time.Since(synced).Seconds()
	childrenBy, _ := b.requestsBy(ctx)
	b.debugRequests("children", syncedBy, childrenBy)
	b.debugCPU("children", syncedCPU, b.cpu())
	f.ChildrenRatio = f.ChildrenSeconds / f.ChildrenFloor
	// Then every PyJob's status: the rest of the children's writes.
	if err := b.waitStatuses(ctx, 10*time.Minute); err != nil {
		return err
	}
	f.StatusSeconds = time.Since(synced).Seconds()
	statusBy, _ := b.requestsBy(ctx)
	b.debugRequests("statuses", childrenBy, statusBy)
	f.WritesRatio = f.StatusSeconds / f.WritesFloor
	return nil
}
