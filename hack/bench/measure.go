package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/app"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/signature"
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
	if err := applyTyped(ctx, b.c, floorJobs); err != nil {
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

func (b *bench) start() error {
	addr, err := testenv.FreeAddr()
	if err != nil {
		return err
	}
	b.hookAddr = addr
	if b.metricsAddr, err = testenv.FreeAddr(); err != nil {
		return err
	}
	secret := filepath.Join(b.dir, "hook")
	if err := os.WriteFile(secret, []byte(hookSecret), 0o600); err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(b.dir, "trainops.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	b.proc = exec.Command(b.bin, "run",
		"--kubeconfig="+b.env.Kubeconfig,
		"--namespace="+inventoryNS,
		"--repo-url="+b.git.URL(b.repoName),
		"--reconcile-interval=1h",
		"--webhook-bind-address="+addr,
		"--webhook-secret-file="+secret,
		"--cache-dir="+filepath.Join(b.dir, "git"),
		"--metrics-bind-address="+b.metricsAddr,
		"--profiling",
		"--health-probe-bind-address=0",
		"--leader-election=false",
		"--log-format=json")
	b.proc.Stdout, b.proc.Stderr = log, log
	b.proc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.proc.Start(); err != nil {
		return err
	}
	// Wait for the webhook to listen.
	return poll(30*time.Second, func() (bool, error) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil, nil
	})
}

func (b *bench) stop() {
	if b.proc == nil || b.proc.Process == nil {
		return
	}
	_ = b.proc.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = b.proc.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = b.proc.Process.Kill()
		<-done
	}
	b.proc = nil
}

// hook sends trainops a signed push notification.
func (b *bench) hook() error {
	req, err := signature.PushRequest("http://"+b.hookAddr+"/hook", []byte(hookSecret))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("webhook: %s", resp.Status)
	}
	return nil
}

// waitSynced waits until the inventory records a successful sync of
// revision (any, when empty) attempted after since. It watches the
// inventory rather than polling it, so waiting adds no load to the API
// server that the floors do not have.
func (b *bench) waitSynced(ctx context.Context, revision string, since time.Time, timeout time.Duration) (*gitops.Inventory, error) {
	var inv *gitops.Inventory
	name := app.SyncName + "-inventory"
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = "metadata.name=" + name
			return b.cs.CoreV1().ConfigMaps(inventoryNS).List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = "metadata.name=" + name
			return b.cs.CoreV1().ConfigMaps(inventoryNS).Watch(ctx, o)
		},
	}
	err := until(ctx, timeout, lw, &corev1.ConfigMap{}, func(ev watch.Event) (bool, error) {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok || ev.Type == watch.Deleted {
			return false, nil
		}
		var err error
		if inv, err = gitops.DecodeInventory(cm); err != nil {
			return false, err
		}
		if inv.LastError != "" && inv.LastAttemptedTime.After(since) {
			return false, fmt.Errorf("sync failed: %s", inv.LastError)
		}
		return inv.LastAppliedRevision != "" && (revision == "" || strings.HasSuffix(inv.LastAppliedRevision, revision)) &&
			!inv.LastAppliedTime.Before(since.Truncate(time.Second)), nil
	})
	return inv, err
}

// waitJobs waits until every PyJob's Job exists, watching Jobs (metadata
// only) rather than listing them over and over.
func (b *bench) waitJobs(ctx context.Context, timeout time.Duration) error {
	gvr := batchv1.SchemeGroupVersion.WithResource("jobs")
	sel := builder.LabelManagedBy + "=" + builder.ManagedBy
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return b.md.Resource(gvr).List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return b.md.Resource(gvr).Watch(ctx, o)
		},
	}
	seen := map[string]bool{}
	return until(ctx, timeout, lw, &metav1.PartialObjectMetadata{}, func(ev watch.Event) (bool, error) {
		m, ok := ev.Object.(*metav1.PartialObjectMetadata)
		if ok && ev.Type == watch.Added && strings.HasPrefix(m.Namespace, "bench-") {
			seen[m.Namespace+"/"+m.Name] = true
		}
		return len(seen) >= b.pyjobs, nil
	})
}

// waitStatuses waits until every PyJob has a status, watching PyJobs.
func (b *bench) waitStatuses(ctx context.Context, timeout time.Duration) error {
	dyn, err := dynamic.NewForConfig(b.env.Config)
	if err != nil {
		return err
	}
	gvr := trainingv1alpha1.GroupVersion.WithResource("pyjobs")
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			return dyn.Resource(gvr).List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			return dyn.Resource(gvr).Watch(ctx, o)
		},
	}
	seen := map[string]bool{}
	return until(ctx, timeout, lw, &unstructured.Unstructured{}, func(ev watch.Event) (bool, error) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if ok && strings.HasPrefix(u.GetNamespace(), "bench-") {
			if _, has, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); has {
				seen[u.GetNamespace()+"/"+u.GetName()] = true
			}
		}
		return len(seen) >= b.pyjobs, nil
	})
}

// until watches lw until cond holds, timeout passes or cond fails.
func until(ctx context.Context, timeout time.Duration, lw cache.ListerWatcher, obj runtime.Object, cond watchtools.ConditionFunc) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := watchtools.UntilWithSync(ctx, lw, obj, nil, cond)
	if errors.Is(err, wait.ErrWaitTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("timed out after %s", timeout)
	}
	return err
}

// requests sums apiserver_request_total over resource requests, less the
// API server's own lease renewals (not trainops's doing).
func (b *bench) requests(ctx context.Context) (float64, error) {
	m, err := b.requestsBy(ctx)
	if err != nil {
		return 0, err
	}
	total := 0.0
	for k, v := range m {
		if !strings.Contains(k, `,resource="leases"`) && !strings.Contains(k, `,resource=""`) {
			total += v
		}
	}
	return total, nil
}

// syncCount is the number of successful syncs trainops has reported on its
// metrics endpoint.
func (b *bench) syncCount() (float64, error) {
	resp, err := http.Get("http://" + b.metricsAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, `trainops_sync_duration_seconds_count{result="success"}`) {
			return strconv.ParseFloat(strings.Fields(l)[1], 64)
		}
	}
	return 0, nil
}

// settled waits until the API server has seen no resource request for a
// second, and returns the count.
func (b *bench) settled(ctx context.Context) (float64, error) {
	last, err := b.requests(ctx)
	if err != nil {
		return 0, err
	}
	stable := time.Now()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		n, err := b.requests(ctx)
		if err != nil {
			return 0, err
		}
		if n != last {
			last, stable = n, time.Now()
			continue
		}
		if time.Since(stable) >= time.Second {
			return n, nil
		}
	}
	return last, nil
}

// cpuTimes are the CPU seconds each process has used, and when they were
// read.
type cpuTimes struct {
	at    time.Time
	procs map[string]float64
}

// cpu reads the CPU time of trainops, kube-apiserver, etcd and the harness.
func (b *bench) cpu() cpuTimes {
	out := cpuTimes{at: time.Now(), procs: map[string]float64{}}
	pids := map[string]int{"harness": os.Getpid()}
	for _, name := range []string{"kube-apiserver", "etcd", "kube-controller-manager"} {
		if pid := b.env.PID(name); pid != 0 {
			pids[name] = pid
		}
	}
	if b.proc != nil && b.proc.Process != nil {
		pids["trainops"] = b.proc.Process.Pid
	}
	for name, pid := range pids {
		_, out.procs[name] = usage(pid)
	}
	return out
}

// debugCPU prints, for BENCH_DEBUG, the cores each process used between
// two readings.
func (b *bench) debugCPU(what string, before, after cpuTimes) {
	if os.Getenv("BENCH_DEBUG") == "" {
		return
	}
	secs := after.at.Sub(before.at).Seconds()
	var parts []string
	for _, name := range []string{"kube-apiserver", "etcd", "kube-controller-manager", "trainops", "harness"} {
		if _, ok := after.procs[name]; !ok {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", name, (after.procs[name]-before.procs[name])/secs))
	}
	fmt.Printf("    %s: cores used over %.2f s: %s\n", what, secs, strings.Join(parts, ", "))
}

// debugRequests prints, for BENCH_DEBUG, the resource requests the API
// server served between two readings of requestsBy.
func (b *bench) debugRequests(what string, before, after map[string]float64) {
	if os.Getenv("BENCH_DEBUG") == "" {
		return
	}
	var lines []string
	total := 0.0
	for k, v := range after {
		if d := v - before[k]; d > 0 && !strings.Contains(k, `,resource=""`) {
			lines = append(lines, fmt.Sprintf("      %6.0f %s", d, k))
			total += d
		}
	}
	sort.Strings(lines)
	fmt.Printf("    %s: %.0f requests\n%s\n", what, total, strings.Join(lines, "\n"))
}

// requestsBy is apiserver_request_total by its label set.
func (b *bench) requestsBy(ctx context.Context) (map[string]float64, error) {
	out := map[string]float64{}
	raw, err := b.cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	s := bufio.NewScanner(strings.NewReader(string(raw)))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		i := strings.LastIndex(line, " ")
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] += v
		}
	}
	return out, nil
}

// usage is the peak resident memory (MiB) and CPU time (s) of a process.
func usage(pid int) (float64, float64) {
	rss := 0.0
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmHWM:") {
				kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
				rss = kb / 1024
			}
		}
	}
	cpu := 0.0
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		fields := strings.Fields(s[strings.LastIndex(s, ")")+2:])
		utime, _ := strconv.ParseFloat(fields[11], 64)
		stime, _ := strconv.ParseFloat(fields[12], 64)
		cpu = (utime + stime) / 100 // USER_HZ
	}
	return rss, cpu
}

func poll(timeout time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// plainApply is the floor: server-side apply of every object, namespaces
// first, from 16 goroutines.
func plainApply(ctx context.Context, c client.Client, objs []object) error {
	var first, rest []client.Object
	for _, o := range objs {
		if o.kind == "Namespace" {
			first = append(first, o.u)
		} else {
			rest = append(rest, o.u)
		}
	}
	if err := applyTyped(ctx, c, first); err != nil {
		return err
	}
	return applyTyped(ctx, c, rest)
}

func applyTyped(ctx context.Context, c client.Client, objs []client.Object) error {
	return parallel(len(objs), func(i int) error { return applyOne(ctx, c, objs[i]) })
}

// applyOne applies o with server-side apply as the field manager "floor".
func applyOne(ctx context.Context, c client.Client, o client.Object) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "creationTimestamp")
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("floor"), client.ForceOwnership)
}

// otherWrites makes, for each PyJob, the writes besides its Job that
// trainops makes: the headless Service (server-side apply), the first
// status (a merge patch of the status subresource) and one Event.
func (b *bench) otherWrites(ctx context.Context, pjs []*trainingv1alpha1.PyJob) error {
	return parallel(len(pjs), func(i int) error {
		svc := serviceOf(pjs[i])
		if err := applyOne(ctx, b.c, svc); err != nil {
			return err
		}
		cur := &trainingv1alpha1.PyJob{}
		if err := b.c.Get(ctx, client.ObjectKeyFromObject(pjs[i]), cur); err != nil {
			return err
		}
		if err := firstStatus(ctx, b.c, cur); err != nil {
			return err
		}
		return createdEvent(ctx, b.cs, cur, "created Service "+svc.Name+", Job "+builder.JobName(cur))
	})
}

// jobOf is the Job a plain client creates for pj: trainops's, without the
// owner.
func jobOf(pj *trainingv1alpha1.PyJob) *batchv1.Job {
	job := builder.JobFor(pj)
	job.OwnerReferences = nil
	return job
}

// serviceOf is the headless Service a plain client creates for pj.
func serviceOf(pj *trainingv1alpha1.PyJob) *corev1.Service {
	svc := builder.ServiceFor(pj)
	svc.OwnerReferences = nil
	return svc
}

// firstStatus writes the status trainops gives a new PyJob (cur, as it is
// in the cluster) with a merge patch of the status subresource.
func firstStatus(ctx context.Context, c client.Client, cur *trainingv1alpha1.PyJob) error {
	next := cur.DeepCopy()
	now := metav1.Now()
	msg := "waiting for 2 workers to be scheduled and started"
	next.Status = trainingv1alpha1.PyJobStatus{Phase: trainingv1alpha1.PyJobPending, Message: msg, JobName: builder.JobName(cur), ObservedGeneration: cur.Generation,
		Conditions: []metav1.Condition{
			{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Progressing", Message: msg, LastTransitionTime: now, ObservedGeneration: cur.Generation},
			{Type: "Reconciling", Status: metav1.ConditionTrue, Reason: "Progressing", Message: msg, LastTransitionTime: now, ObservedGeneration: cur.Generation},
		}}
	return c.Status().Patch(ctx, next, client.MergeFrom(cur), client.FieldOwner("floor"))
}

// createdEvent records the Event trainops records for a new PyJob.
func createdEvent(ctx context.Context, cs kubernetes.Interface, pj *trainingv1alpha1.PyJob, note string) error {
	_, err := cs.EventsV1().Events(pj.Namespace).Create(ctx, &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pj.Name, time.Now().UnixNano())},
		EventTime:           metav1.NowMicro(),
		ReportingController: "floor", ReportingInstance: "floor",
		Action: "Create", Reason: "Created", Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{APIVersion: trainingv1alpha1.GroupVersion.String(), Kind: "PyJob", Namespace: pj.Namespace, Name: pj.Name, UID: pj.UID},
		Note:      note,
	}, metav1.CreateOptions{})
	return err
}

// controlPlane starts a fresh kube-apiserver and etcd, stopping the
// previous ones, and points the harness's clients at it; full also starts
// kube-controller-manager, kube-scheduler and kwok's simulated GPU nodes.
func (b *bench) controlPlane(ctx context.Context, full bool) error {
	if b.env != nil {
		b.env.Stop()
	}
	if full {
		say("  starting kube-apiserver, etcd, the controllers and GPU nodes")
	} else {
		say("  starting kube-apiserver and etcd")
	}
	env, err := testenv.Start(ctx, testenv.Options{Full: full})
	if err != nil {
		return err
	}
	b.env = env
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1 // the floor: no client-side rate limit
	if b.c, err = client.New(cfg, client.Options{Scheme: controller.NewScheme()}); err != nil {
		return err
	}
	if b.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	b.md, err = metadata.NewForConfig(cfg)
	return err
}

// parallel runs fn(0..n-1) from 16 goroutines and returns the first error.
func parallel(n int, fn func(i int) error) error {
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

// profile saves 10 s of trainops's CPU profile, for BENCH_PROFILE.
func profile(addr, path string) {
	secs := os.Getenv("BENCH_PROFILE_SECONDS")
	if _, err := strconv.Atoi(secs); err != nil {
		secs = "10"
	}
	kind := "profile"
	if strings.HasSuffix(path, ".trace") {
		kind = "trace"
	}
	download("http://"+addr+"/debug/pprof/"+kind+"?seconds="+secs, path)
}

// download saves what url answers to path, for a look after the run.
func download(url, path string) {
	resp, err := http.Get(url)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = io.Copy(f, resp.Body)
}

// apiserverProfile saves 5 s of kube-apiserver's CPU profile, for
// BENCH_APISERVER_PROFILE.
func (b *bench) apiserverProfile(ctx context.Context, path string) {
	raw, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "5").DoRaw(ctx)
	if err != nil {
		say("  kube-apiserver profile: %v", err)
		return
	}
	_ = os.WriteFile(path, raw, 0o600)
}

// lastLogLine is the last line of a log holding text.
func lastLogLine(path, text string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	last := ""
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, text) {
			last = l
		}
	}
	return last
}
