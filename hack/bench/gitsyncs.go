// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/fluxcd/pkg/runtime/conditions"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/benchrepo"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/signature"
)

// GitSyncFigures are the many-teams case: GitSyncs GitSyncs, each its own
// repository of PyJobsEach PyJobs in its own namespace, served by one
// trainops process.
type GitSyncFigures struct {
	GitSyncs   int `json:"gitSyncs"`
	PyJobsEach int `json:"pyjobsEach"`
	// ColdSeconds is from every GitSync created to every one Ready at its
	// revision; ColdFloorSeconds a plain client applying the same PyJobs
	// with server-side apply from 16 goroutines.
	ColdSeconds      float64 `json:"coldSyncSeconds"`
	ColdFloorSeconds float64 `json:"coldSyncFloorSeconds"`
	ColdRatio        float64 `json:"coldSyncRatio"`
	// What the cold sync and the floor cost: CPU seconds of kube-apiserver
	// and etcd, and of the client (trainops; the floor's harness), the
	// API requests served; for the cold sync also the Git server's CPU
	// (the harness, which serves Git, and the git processes it ran) and
	// the Jobs the reconcilers created meanwhile for the GitSyncs already
	// done.
	ColdAPIServerCPU  float64 `json:"coldSyncAPIServerCPUSeconds,omitempty"`
	ColdClientCPU     float64 `json:"coldSyncTrainopsCPUSeconds,omitempty"`
	ColdGitCPU        float64 `json:"coldSyncGitServerCPUSeconds,omitempty"`
	ColdRequests      float64 `json:"coldSyncRequests,omitempty"`
	ColdJobs          float64 `json:"coldSyncJobs,omitempty"`
	FloorAPIServerCPU float64 `json:"coldFloorAPIServerCPUSeconds,omitempty"`
	FloorClientCPU    float64 `json:"coldFloorClientCPUSeconds,omitempty"`
	FloorRequests     float64 `json:"coldFloorRequests,omitempty"`
	// NoopSeconds and NoopRequests are a re-sync of every GitSync with
	// nothing changed, asked by one push per repository; the requests
	// include the webhook's one list of GitSyncs per push.
	NoopSeconds  float64 `json:"noopResyncSeconds"`
	NoopRequests float64 `json:"noopResyncRequests"`
	// NoopPerGitSyncKind is NoopRequests over GitSyncs × the kinds each
	// holds.
	NoopPerGitSyncKind float64          `json:"noopResyncRequestsPerGitSyncKind"`
	PeakRSSMiB         float64          `json:"peakRSSMiB"`
	PeakAnonMiB        float64          `json:"peakAnonMiB"`
	Runs               []GitSyncFigures `json:"runs,omitempty"`
	// Date and Command say when and how the case was measured.
	Date    string `json:"date,omitempty"`
	Command string `json:"command,omitempty"`
}

// printGitSyncs prints the many-teams case, if measured.
func printGitSyncs(w io.Writer, g *GitSyncFigures) {
	if g == nil {
		return
	}
	fmt.Fprintf(w, "%d GitSyncs × %d PyJobs: cold sync %.2f s (floor %.2f s, ×%.2f); no-op re-sync %.2f s, %.0f requests (%.1f per GitSync and kind); peak RSS %.0f MiB (anonymous %.0f)\n",
		g.GitSyncs, g.PyJobsEach, g.ColdSeconds, g.ColdFloorSeconds, g.ColdRatio, g.NoopSeconds, g.NoopRequests, g.NoopPerGitSyncKind, g.PeakRSSMiB, g.PeakAnonMiB)
}

// writeGitSyncs writes the many-teams case's section of the benchmarks
// page.
func writeGitSyncs(b *strings.Builder, g *GitSyncFigures) {
	if g == nil {
		return
	}
	fmt.Fprintf(b, `
## Many teams: %d GitSyncs

One trainops process (default settings: %d GitSyncs synced at once) serves
%d GitSyncs, each following a repository of its own on the Git server
with %d PyJobs in its team's namespace (%d PyJobs in all). The cold sync
runs from every GitSync created to every one Ready at its revision,
against a plain client applying the same PyJobs with server-side apply
from 16 goroutines on a control plane of its own. The no-op re-sync is one
signed push per repository, nothing changed, until every GitSync has
synced: its requests include the webhook's one list of GitSyncs per push.
Targets: cold sync ≤ 1.2× the floor; no-op cost growing with GitSyncs ×
kinds, not with objects. Measured on %s by `+"`%s`"+`, median of %d runs.

| GitSyncs × PyJobs | cold sync (floor, ratio) | no-op re-sync | requests (per GitSync and kind) | peak RSS (anonymous) |
|---|---|---|---|---|
| %d × %d | %.2f s (%.2f s, ×%.2f) | %.2f s | %.0f (%.1f) | %.0f MiB (%.0f) |
`, g.GitSyncs, config.DefaultMaxConcurrentGitSyncs, g.GitSyncs, g.PyJobsEach, g.GitSyncs*g.PyJobsEach, g.Date, g.Command, max(len(g.Runs), 1),
		g.GitSyncs, g.PyJobsEach, g.ColdSeconds, g.ColdFloorSeconds, g.ColdRatio, g.NoopSeconds, g.NoopRequests, g.NoopPerGitSyncKind, g.PeakRSSMiB, g.PeakAnonMiB)
	if len(g.Runs) > 1 {
		var cold []string
		for _, r := range g.Runs {
			cold = append(cold, fmt.Sprintf("×%.2f", r.ColdRatio))
		}
		fmt.Fprintf(b, "\nEach run's cold sync ratio: %s.\n", strings.Join(cold, ", "))
	}
	writeGitSyncCosts(b, g)
}

// writeGitSyncCosts writes where the many-teams cold sync's time goes,
// when the run measured it.
func writeGitSyncCosts(b *strings.Builder, g *GitSyncFigures) {
	if g.ColdAPIServerCPU == 0 || g.FloorAPIServerCPU == 0 {
		return
	}
	floor := g.FloorAPIServerCPU + g.FloorClientCPU
	cold := g.ColdAPIServerCPU + g.ColdClientCPU + g.ColdGitCPU
	fmt.Fprintf(b, `
Where its time goes: the CPU time each side of the cold sync spent,
medians of the runs: kube-apiserver and etcd; the client (the floor's:
the harness; the sync's: trainops); the Git server, which runs in the
harness (its own CPU and the git processes it ran for each fetch); then
the API requests served, and the Jobs trainops created meanwhile for the
GitSyncs already synced. They all share this machine's cores, so the cold
sync lasts as long as the CPU they spend together takes: each GitSync's
sync fetches its revision, renders it, validates its new objects offline,
and writes its inventory and status; once it is done, its PyJobs' Jobs
are made, a few at a time while other GitSyncs still write ([the
reconcilers give way](design.md)). The floor, handed its objects, does
none of it.

| | API server and etcd CPU | client CPU | Git server CPU | all | requests | Jobs meanwhile |
|---|---|---|---|---|---|---|
| floor | %.2f s | %.2f s | – | %.2f s | %.0f | – |
| cold sync | %.2f s | %.2f s | %.2f s | %.2f s (×%.2f) | %.0f | %.0f |
`, g.FloorAPIServerCPU, g.FloorClientCPU, floor, g.FloorRequests,
		g.ColdAPIServerCPU, g.ColdClientCPU, g.ColdGitCPU, cold, ratio(cold, floor), g.ColdRequests, g.ColdJobs)
}

// gitSyncCase reads BENCH_GITSYNCS ("50x100" by default: GitSyncs ×
// PyJobs each; "0" skips the case).
func gitSyncCase() (gitsyncs, each int, err error) {
	v := os.Getenv("BENCH_GITSYNCS")
	switch v {
	case "":
		return 50, 100, nil
	case "0":
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(v, "x")
	if gitsyncs, err = strconv.Atoi(a); ok && err == nil {
		each, err = strconv.Atoi(b)
	}
	if !ok || err != nil || gitsyncs < 1 || each < 1 {
		return 0, 0, fmt.Errorf("BENCH_GITSYNCS=%q: want GITSYNCSxPYJOBS, e.g. 50x100, or 0", v)
	}
	return gitsyncs, each, nil
}

// measureGitSyncs measures the many-teams case runs times and returns the
// medians.
func measureGitSyncs(ctx context.Context, root, bin string, gitsyncs, each, runs int) (*GitSyncFigures, error) {
	say("%d GitSyncs of %d PyJobs each", gitsyncs, each)
	var all []reflect.Value
	var runFigures []GitSyncFigures
	for i := range runs {
		if runs > 1 {
			say("  run %d of %d", i+1, runs)
		}
		f, err := measureGitSyncsOnce(ctx, root, bin, gitsyncs, each)
		if err != nil {
			return nil, err
		}
		runFigures = append(runFigures, *f)
		all = append(all, reflect.ValueOf(f).Elem())
	}
	out := runFigures[0]
	medianFields(reflect.ValueOf(&out).Elem(), all)
	if runs > 1 {
		out.Runs = runFigures
	}
	return &out, nil
}

// teamNS is team i's namespace: under bench-, as the waits expect.
func teamNS(i int) string { return fmt.Sprintf("bench-team-%02d", i) }

func measureGitSyncsOnce(ctx context.Context, root, bin string, gitsyncs, each int) (f *GitSyncFigures, err error) {
	b := &bench{n: gitsyncs * each, root: root, bin: bin, pyjobs: gitsyncs * each}
	if b.dir, err = os.MkdirTemp("", "trainops-bench-gitsyncs-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(b.dir)
	f = &GitSyncFigures{GitSyncs: gitsyncs, PyJobsEach: each}
	if os.Getenv("BENCH_DEBUG") != "" {
		defer func() {
			if raw, err := os.ReadFile(filepath.Join(b.dir, "trainops.log")); err == nil {
				out := filepath.Join(os.TempDir(), "trainops-bench-gitsyncs.log")
				if os.WriteFile(out, raw, 0o600) == nil {
					say("  trainops's log: %s", out)
				}
			}
		}()
	}
	if err := b.controlPlane(ctx, false); err != nil {
		return nil, err
	}
	defer func() { b.env.Stop() }()
	if f.ColdFloorSeconds, err = b.gitSyncFloor(ctx, f, gitsyncs, each); err != nil {
		return nil, err
	}
	// trainops on a fresh control plane, with no repository of its own:
	// each team's namespace and repository, and its GitSync.
	if err := b.controlPlane(ctx, false); err != nil {
		return nil, err
	}
	if b.git, err = gitserver.Start("", ""); err != nil {
		return nil, err
	}
	defer b.git.Stop()
	if err := b.teamRepos(ctx, gitsyncs, each); err != nil {
		return nil, err
	}
	if err := b.startWith(); err != nil {
		return nil, err
	}
	defer b.stop()
	if _, err := b.settled(ctx); err != nil {
		return nil, err
	}
	if err := b.gitSyncCold(ctx, f, gitsyncs); err != nil {
		return nil, err
	}
	if err := b.gitSyncNoop(ctx, f, gitsyncs); err != nil {
		return nil, err
	}
	f.PeakRSSMiB, _ = usage(b.proc.Pid())
	f.PeakAnonMiB = float64(b.anon.Load()) / 1024
	return f, nil
}

// gitSyncFloor times a plain client applying the same PyJobs (with their
// namespaces) with server-side apply.
func (b *bench) gitSyncFloor(ctx context.Context, f *GitSyncFigures, gitsyncs, each int) (float64, error) {
	var floor []benchrepo.Object
	for i := range gitsyncs {
		ns := fmt.Sprintf("floor-team-%02d", i)
		floor = append(floor, benchrepo.NamespaceObject(ns))
		for j := range each {
			floor = append(floor, benchrepo.NewPyJob(ns, fmt.Sprintf("job-%04d", j)))
		}
	}
	say("  floor: plain server-side apply of %d objects from 16 goroutines", len(floor))
	if _, err := b.settled(ctx); err != nil {
		return 0, err
	}
	beforeReqs, _ := b.requestsBy(ctx)
	before := b.cpu()
	t := time.Now()
	if err := plainApply(ctx, b.c, floor); err != nil {
		return 0, err
	}
	took := time.Since(t).Seconds()
	afterReqs, _ := b.requestsBy(ctx)
	c := costOf(before, b.cpu(), beforeReqs, afterReqs, "harness")
	f.FloorAPIServerCPU, f.FloorClientCPU, f.FloorRequests = c.apiServerCPU, c.clientCPU, c.requests
	return took, nil
}

// teamRepos makes each team's namespace, and its repository of each
// PyJobs on the Git server.
func (b *bench) teamRepos(ctx context.Context, gitsyncs, each int) error {
	for i := range gitsyncs {
		ns := teamNS(i)
		if err := b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
		repo, err := b.git.NewRepo(ns+".git", "main", "")
		if err != nil {
			return err
		}
		var objs []benchrepo.Object
		for j := range each {
			objs = append(objs, benchrepo.NewPyJob(ns, fmt.Sprintf("job-%04d", j)))
		}
		if err := benchrepo.Write(repo.Dir, objs, benchrepo.Plain); err != nil {
			return err
		}
		if _, err := repo.CommitAndPush("jobs"); err != nil {
			return err
		}
		repo.Close()
	}
	return nil
}

// gitSyncCold times every GitSync created to every one Ready, then waits
// for the reconcilers' children.
func (b *bench) gitSyncCold(ctx context.Context, f *GitSyncFigures, gitsyncs int) error {
	say("  cold sync of %d GitSyncs", gitsyncs)
	ready := b.watchGitSyncs(ctx, gitsyncs)
	coldBy, _ := b.requestsBy(ctx)
	coldCPU := b.cpu()
	if p := os.Getenv("BENCH_PROFILE"); p != "" {
		go profile(b.metricsAddr, p)
	}
	if p := os.Getenv("BENCH_APISERVER_PROFILE"); p != "" {
		go b.apiserverProfile(ctx, p+".gitsyncs", profileSeconds())
	}
	t := time.Now()
	for i := range gitsyncs {
		ns := teamNS(i)
		gs := &gitopsv1alpha1.GitSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "training"},
			Spec: gitopsv1alpha1.GitSyncSpec{Repository: gitopsv1alpha1.GitRepository{URL: b.git.URL(ns + ".git"), Branch: "main"}}}
		if err := b.c.Create(ctx, gs); err != nil {
			return err
		}
	}
	select {
	case err := <-ready:
		if err != nil {
			return err
		}
	case <-time.After(10 * time.Minute):
		return fmt.Errorf("GitSyncs not all ready after 10 minutes")
	}
	f.ColdSeconds = time.Since(t).Seconds()
	f.ColdRatio = ratio(f.ColdSeconds, f.ColdFloorSeconds)
	syncedBy, _ := b.requestsBy(ctx)
	syncedCPU := b.cpu()
	b.debugRequests("cold sync", coldBy, syncedBy)
	b.debugCPU("cold sync", coldCPU, syncedCPU)
	c := costOf(coldCPU, syncedCPU, coldBy, syncedBy, "trainops")
	f.ColdAPIServerCPU, f.ColdClientCPU, f.ColdRequests = c.apiServerCPU, c.clientCPU, c.requests
	f.ColdGitCPU = syncedCPU.procs["git server"] - coldCPU.procs["git server"]
	f.ColdJobs = jobsCreated(coldBy, syncedBy)
	// The reconcilers make the PyJobs' children meanwhile; the no-op
	// re-sync starts once they are done.
	if err := b.waitJobs(ctx, 10*time.Minute); err != nil {
		return err
	}
	return b.waitStatuses(ctx, 10*time.Minute)
}

// gitSyncNoop times one push per repository, nothing changed, until every
// GitSync has synced, and counts the API requests.
func (b *bench) gitSyncNoop(ctx context.Context, f *GitSyncFigures, gitsyncs int) error {
	say("  no-op re-sync of %d GitSyncs, one push each", gitsyncs)
	before, err := b.settled(ctx)
	if err != nil {
		return err
	}
	noopBy, _ := b.requestsBy(ctx)
	done, err := b.gitSyncReconciles()
	if err != nil {
		return err
	}
	t := time.Now()
	for i := range gitsyncs {
		if err := b.pushOf(teamNS(i) + ".git"); err != nil {
			return err
		}
	}
	if err := poll(5*time.Minute, func() (bool, error) {
		n, err := b.gitSyncReconciles()
		return n >= done+float64(gitsyncs), err
	}); err != nil {
		return err
	}
	f.NoopSeconds = time.Since(t).Seconds()
	after, err := b.settled(ctx)
	if err != nil {
		return err
	}
	f.NoopRequests = after - before
	afterBy, _ := b.requestsBy(ctx)
	b.debugRequests("no-op re-sync", noopBy, afterBy)
	// Each GitSync holds one kind: PyJobs.
	f.NoopPerGitSyncKind = f.NoopRequests / float64(gitsyncs)
	return nil
}

// watchGitSyncs reports on the returned channel once n GitSyncs are Ready
// at a revision, watching them (so the wait adds no load).
func (b *bench) watchGitSyncs(ctx context.Context, n int) <-chan error {
	out := make(chan error, 1)
	dyn, err := dynamic.NewForConfig(b.env.Config)
	if err != nil {
		out <- err
		return out
	}
	gvr := gitopsv1alpha1.GroupVersion.WithResource("gitsyncs")
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) { return dyn.Resource(gvr).List(ctx, o) },
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			return dyn.Resource(gvr).Watch(ctx, o)
		},
	}
	go func() {
		ready := map[string]bool{}
		out <- until(ctx, 10*time.Minute, lw, &unstructured.Unstructured{}, func(ev watch.Event) (bool, error) {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				return false, nil
			}
			gs := &gitopsv1alpha1.GitSync{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, gs); err != nil {
				return false, err
			}
			ready[gs.Namespace+"/"+gs.Name] = conditions.IsReady(gs) && gs.Status.LastAppliedRevision != ""
			count := 0
			for _, r := range ready {
				if r {
					count++
				}
			}
			return count >= n, nil
		})
	}()
	return out
}

// pushOf sends trainops a signed push of repository name on the Git
// server, as GitHub sends it.
func (b *bench) pushOf(name string) error {
	body := fmt.Sprintf(`{"ref":"refs/heads/main","repository":{"clone_url":%q}}`, b.git.URL(name))
	req, err := http.NewRequest(http.MethodPost, "http://"+b.hookAddr+"/hook", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set(signature.HeaderGitHubEvent, "push")
	req.Header.Set(signature.HeaderGitHubSignature, signature.Sign([]byte(hookSecret), []byte(body)))
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

// gitSyncReconciles is how many GitSync reconciles trainops has finished
// without error, from its metrics endpoint.
func (b *bench) gitSyncReconciles() (float64, error) {
	return b.metricSum(func(l string) bool {
		return strings.HasPrefix(l, `controller_runtime_reconcile_total{controller="gitsync",`) && !strings.Contains(l, `result="error"`)
	})
}

// startWith starts trainops with no repository of its own: GitSyncs only.
func (b *bench) startWith() error {
	return b.startArgs("--cache-dir=" + filepath.Join(b.dir, "git"))
}

// jobsCreated counts the Jobs created between two readings of the API
// server's request counts.
func jobsCreated(before, after map[string]float64) float64 {
	n := 0.0
	for k, v := range after {
		if strings.Contains(k, `resource="jobs"`) && strings.Contains(k, `verb="POST"`) && strings.Contains(k, `code="201"`) {
			n += v - before[k]
		}
	}
	return n
}
