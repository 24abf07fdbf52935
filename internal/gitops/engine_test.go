// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/crdschema"
	"github.com/trainops/trainops/internal/scheme"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/render"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	render.ServeIfChild() // a test that renders starts this binary as the child
	os.Exit(testenv.Main(m, testenv.Options{}, &env))
}

// counter counts the requests a client makes, and records those that
// change something (dry runs aside) and the reads (path and query).
type counter struct {
	rt     http.RoundTripper
	n      atomic.Int64
	mu     sync.Mutex
	writes []string
	reads  []string
}

// takeReads returns the reads recorded since the last call.
func (c *counter) takeReads() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.reads
	c.reads = nil
	return out
}

// takeWrites returns the writes recorded since the last call, except to
// the inventory ConfigMap (a refused revision records its error there).
func (c *counter) takeWrites(inventory string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, w := range c.writes {
		if !strings.HasSuffix(w, "/configmaps/"+inventory) {
			out = append(out, w)
		}
	}
	c.writes = nil
	return out
}

// roundTripFunc is a RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	c.mu.Lock()
	switch {
	case r.Method == http.MethodGet:
		c.reads = append(c.reads, r.URL.Path+"?"+r.URL.RawQuery)
	case r.URL.Query().Get("dryRun") == "":
		c.writes = append(c.writes, r.Method+" "+r.URL.Path)
	}
	c.mu.Unlock()
	return c.rt.RoundTrip(r)
}

// newEngine builds an engine for one test, with its own sync name and
// inventory so tests do not see each other's objects.
func newEngine(t *testing.T, name string) (*Engine, *counter) {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cnt := &counter{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { cnt.rt = rt; return cnt }
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.New(), Mapper: mapper, HTTPClient: httpClient})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name + "-system"}}
	if err := c.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	schemas, err := crdschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{Client: c, Mapper: mapper, Schemas: schemas, Opts: Options{
		Name: name, Namespace: ns.Name, Path: ".", Repo: "https://git.example/" + name,
		AllowedKinds: check.DefaultAllowedKinds, Prune: true, PruneBudget: config.Budget{Percent: 50}, Force: true, Concurrency: 8,
	}}
	if err := e.Connect(cfg, httpClient); err != nil {
		t.Fatal(err)
	}
	return e, cnt
}

// repo is a folder standing for one revision of a training-config repo.
type repo struct {
	t   *testing.T
	dir string
	rev int
}

func newRepo(t *testing.T) *repo { return &repo{t: t, dir: t.TempDir()} }

func (r *repo) write(path, content string) *repo {
	p := filepath.Join(r.dir, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return r
}

func (r *repo) remove(path string) *repo {
	if err := os.Remove(filepath.Join(r.dir, path)); err != nil {
		r.t.Fatal(err)
	}
	return r
}

func (r *repo) sync(e *Engine) (Result, error) {
	r.rev++
	return r.resync(e)
}

// resync syncs the current revision again, as the interval does when Git
// has not changed.
func (r *repo) resync(e *Engine) (Result, error) {
	return e.Sync(context.Background(), r.dir, fmt.Sprintf("main@sha1:%040d", r.rev))
}

// mustResync syncs r's current revision again.
func mustResync(t *testing.T, r *repo, e *Engine) Result {
	t.Helper()
	res, err := r.resync(e)
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	return res
}

func pyjob(ns, name, image string, gpu int) string {
	return fmt.Sprintf(`apiVersion: training.trainops.dev/v1alpha1
kind: PyJob
metadata:
  name: %s
  namespace: %s
spec:
  image: %s
  command: ["python", "train.py"]
  gpu: %d
`, name, ns, image, gpu)
}

func namespaceYAML(name string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", name)
}

func getPyJob(t *testing.T, e *Engine, ns, name string) (*trainingv1alpha1.PyJob, error) {
	t.Helper()
	pj := &trainingv1alpha1.PyJob{}
	err := e.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pj)
	return pj, err
}

// mustSync syncs a new revision of r.
func mustSync(t *testing.T, r *repo, e *Engine) Result {
	t.Helper()
	r.rev++
	return mustResync(t, r, e)
}

func wantSyncError(t *testing.T, r *repo, e *Engine, reason string, contains ...string) *SyncError {
	t.Helper()
	_, err := r.sync(e)
	var se *SyncError
	if !errors.As(err, &se) || se.Reason != reason {
		t.Fatalf("sync error %v, want reason %s", err, reason)
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("error %q lacks %q", err, c)
		}
	}
	return se
}

func TestSyncAppliesPrunesAndIsAtomic(t *testing.T) {
	e, _ := newEngine(t, "atomic")
	r := newRepo(t).
		write("ns.yaml", namespaceYAML("team-atomic")).
		write("jobs/a.yaml", pyjob("team-atomic", "job-a", "img:1", 1)).
		write("jobs/b.yaml", pyjob("team-atomic", "job-b", "img:1", 2)).
		write("jobs/c.yaml", pyjob("team-atomic", "job-c", "img:1", 0))
	res := mustSync(t, r, e)
	if len(res.Applied) != 4 {
		t.Fatalf("applied %v, want 4 objects", res.Applied)
	}
	pj, err := getPyJob(t, e, "team-atomic", "job-a")
	if err != nil || pj.Labels[LabelSync] != "atomic-system" || pj.Annotations[builder.AnnotationAppliedHash] == "" {
		t.Fatalf("job-a: %v %v", err, pj.ObjectMeta)
	}

	// A change to a PyJob's immutable spec, together with a new PyJob:
	// neither is applied, and the refusal names the PyJob and its file.
	r.write("jobs/a.yaml", pyjob("team-atomic", "job-a", "img:2", 1)).write("jobs/d.yaml", pyjob("team-atomic", "job-d", "img:1", 1))
	wantSyncError(t, r, e, "DryRunFailed", "jobs/a.yaml", "PyJob team-atomic/job-a", "image cannot change once the PyJob is created")
	if _, err := getPyJob(t, e, "team-atomic", "job-d"); !apierrors.IsNotFound(err) {
		t.Fatalf("job-d of a refused revision exists (err %v)", err)
	}
	if pj, _ := getPyJob(t, e, "team-atomic", "job-a"); pj.Spec.Image != "img:1" {
		t.Fatalf("job-a image %s after a refused revision", pj.Spec.Image)
	}
	r.write("jobs/a.yaml", pyjob("team-atomic", "job-a", "img:1", 1)).remove("jobs/d.yaml")

	// A removed file is pruned.
	r.remove("jobs/c.yaml")
	res = mustSync(t, r, e)
	if strings.Join(res.Pruned, ",") != "PyJob team-atomic/job-c" {
		t.Fatalf("pruned %v", res.Pruned)
	}
	if _, err := getPyJob(t, e, "team-atomic", "job-c"); !apierrors.IsNotFound(err) {
		t.Fatalf("job-c not deleted: %v", err)
	}

	// A prune past the budget (2 of 3 objects > 50%) is refused whole.
	r.remove("jobs/a.yaml").remove("jobs/b.yaml").write("jobs/e.yaml", pyjob("team-atomic", "job-e", "img:1", 1))
	wantSyncError(t, r, e, "PruneBudgetExceeded", "prune budget (50%)", "PyJob team-atomic/job-a")
	for _, n := range []string{"job-a", "job-b"} {
		if _, err := getPyJob(t, e, "team-atomic", n); err != nil {
			t.Fatalf("%s deleted past the budget: %v", n, err)
		}
	}
	if _, err := getPyJob(t, e, "team-atomic", "job-e"); !apierrors.IsNotFound(err) {
		t.Fatal("a revision refused for its prunes was applied")
	}
}

func TestBadRevisionsKeepThePreviousState(t *testing.T) {
	e, cnt := newEngine(t, "keep")
	r := newRepo(t).write("ns.yaml", namespaceYAML("team-keep")).write("a.yaml", pyjob("team-keep", "job-a", "img", 1))
	mustSync(t, r, e)
	was, err := getPyJob(t, e, "team-keep", "job-a")
	if err != nil {
		t.Fatal(err)
	}
	if w := cnt.takeWrites("keep-inventory"); len(w) == 0 {
		t.Fatal("the first sync's writes were not seen: the check below would prove nothing")
	}
	// Nothing of a refused revision reaches the cluster: no write but
	// the inventory's record of the error, and what ran is untouched.
	check := func() {
		t.Helper()
		if w := cnt.takeWrites("keep-inventory"); len(w) != 0 {
			t.Errorf("a refused revision wrote to the cluster: %v", w)
		}
		pj, err := getPyJob(t, e, "team-keep", "job-a")
		if err != nil {
			t.Fatalf("previous state lost: %v", err)
		}
		if pj.ResourceVersion != was.ResourceVersion {
			t.Errorf("job-a changed: resourceVersion %s, was %s", pj.ResourceVersion, was.ResourceVersion)
		}
	}
	cases := []struct {
		name, reason string
		edit         func()
		undo         func()
		want         []string
	}{
		{"render error", "RenderFailed", func() { r.write("broken.yaml", "kind: [\n") }, func() { r.remove("broken.yaml") }, []string{"broken.yaml"}},
		{"disallowed kind", "ValidationFailed", func() {
			r.write("rbac.yaml", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: take-over\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\n")
		}, func() { r.remove("rbac.yaml") }, []string{"rbac.yaml", "ClusterRoleBinding take-over", "not allowed"}},
		{"namespace outside the allowed ones", "ValidationFailed", func() {
			e.Opts.AllowedNamespaces = []string{"team-keep"}
			r.write("other.yaml", pyjob("team-other", "x", "img", 1))
		}, func() { e.Opts.AllowedNamespaces = nil; r.remove("other.yaml") }, []string{"other.yaml", "namespace team-other is not allowed"}},
		{"unknown kind", "ValidationFailed", func() {
			r.write("typo.yaml", strings.Replace(pyjob("team-keep", "typo", "img", 1), "kind: PyJob", "kind: PyJobs", 1))
		}, func() { r.remove("typo.yaml") }, []string{"typo.yaml", "PyJobs team-keep/typo", "not allowed"}},
		{"schema violation", "DryRunFailed", func() {
			r.write("schema.yaml", strings.Replace(pyjob("team-keep", "wrong-type", "img", 1), `command: ["python", "train.py"]`, `command: "python train.py"`, 1))
		}, func() { r.remove("schema.yaml") }, []string{"schema.yaml", "spec.command"}},
		{"the cluster's own namespace", "ValidationFailed", func() {
			r.write("coredns.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: coredns\n  namespace: kube-system\ndata:\n  Corefile: hijacked\n")
		}, func() { r.remove("coredns.yaml") }, []string{"coredns.yaml", "ConfigMap kube-system/coredns", "namespace kube-system is protected"}},
		{"trainops's own namespace", "ValidationFailed", func() {
			r.write("own.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: keep-inventory\n  namespace: keep-system\n")
		}, func() { r.remove("own.yaml") }, []string{"own.yaml", "namespace keep-system is protected"}},
		{"a protected namespace declared", "ValidationFailed", func() {
			e.Opts.AllowedNamespaces = []string{"team-keep", "kube-public"}
			r.write("kp.yaml", namespaceYAML("kube-public"))
		}, func() { e.Opts.AllowedNamespaces = nil; r.remove("kp.yaml") }, []string{"kp.yaml", "Namespace kube-public", "namespace kube-public is protected"}},
		{"duplicate", "ValidationFailed", func() { r.write("dup.yaml", pyjob("team-keep", "job-a", "img", 1)) }, func() { r.remove("dup.yaml") }, []string{"dup.yaml", "defined twice"}},
		{"missing namespace", "ValidationFailed", func() {
			r.write("nons.yaml", strings.Replace(pyjob("x", "job-x", "img", 1), "  namespace: x\n", "", 1))
		}, func() { r.remove("nons.yaml") }, []string{"nons.yaml", "metadata.namespace is required"}},
		{"CEL violation", "DryRunFailed", func() { r.write("cel.yaml", pyjob("team-keep", "job-neg", "img", -1)) }, func() { r.remove("cel.yaml") }, []string{"cel.yaml", "gpu cannot be negative"}},
		{"namespace that does not exist", "DryRunFailed", func() { r.write("nons.yaml", pyjob("no-such-team", "job-x", "img", 1)) }, func() { r.remove("nons.yaml") }, []string{"nons.yaml", "namespace no-such-team does not exist"}},
		{"empty render", "EmptyRender", func() { r.remove("a.yaml"); r.remove("ns.yaml") }, func() {
			r.write("ns.yaml", namespaceYAML("team-keep")).write("a.yaml", pyjob("team-keep", "job-a", "img", 1))
		}, []string{"renders no objects"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.edit()
			wantSyncError(t, r, e, tc.reason, tc.want...)
			check()
			tc.undo()
		})
	}
	// Once fixed, the inventory records the new revision and no error.
	mustSync(t, r, e)
	inv, _, err := e.inventory().Load(context.Background())
	if err != nil || inv.LastError != "" || inv.LastAppliedRevision != inv.LastAttemptedRevision {
		t.Fatalf("inventory after recovery: %+v %v", inv, err)
	}
}

func TestNewNamespaceOfARefusedRevisionIsRemoved(t *testing.T) {
	e, _ := newEngine(t, "rollback")
	r := newRepo(t).write("ns.yaml", namespaceYAML("team-rollback-base")).write("a.yaml", pyjob("team-rollback-base", "ok", "img", 1))
	mustSync(t, r, e)
	// A namespace someone else created a moment ago and handed to trainops
	// (adopt), which the revision also names: the apply finds it (200, not
	// 201), so it is not the sync's to remove.
	theirs := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-rollback-theirs", Annotations: map[string]string{AnnotationAdopt: "true"}}}
	if err := e.Client.Create(context.Background(), theirs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), theirs) })
	r.write("ns2.yaml", namespaceYAML("team-rollback-new")).write("b.yaml", pyjob("team-rollback-new", "bad", "img", -3))
	r.write("ns3.yaml", namespaceYAML("team-rollback-theirs"))
	wantSyncError(t, r, e, "DryRunFailed", "b.yaml")
	ns := &corev1.Namespace{}
	err := e.Client.Get(context.Background(), client.ObjectKey{Name: "team-rollback-new"}, ns)
	if err == nil && ns.DeletionTimestamp == nil {
		t.Fatal("the namespace of a refused revision stayed")
	}
	if err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(theirs), ns); err != nil || ns.DeletionTimestamp != nil {
		t.Fatalf("a namespace the sync did not create was removed (err %v, deleting %v)", err, ns.DeletionTimestamp)
	}
}

func TestDriftIsCorrectedAndNoOpResyncCostsPerKind(t *testing.T) {
	e, cnt := newEngine(t, "drift")
	r := newRepo(t).write("ns.yaml", namespaceYAML("team-drift"))
	for i := 0; i < 30; i++ {
		// Git states suspend: false, so a hand-made suspend is drift.
		r.write(fmt.Sprintf("jobs/j%02d.yaml", i), pyjob("team-drift", fmt.Sprintf("job-%02d", i), "img", 1)+"  suspend: false\n")
	}
	mustSync(t, r, e)

	// A new revision with the same files: rendered, nothing applied.
	cnt.n.Store(0)
	res := mustSync(t, r, e)
	if len(res.Applied) != 0 || res.Unchanged != 31 {
		t.Fatalf("no-op re-sync applied %v (unchanged %d)", res.Applied, res.Unchanged)
	}
	// 2 kinds: one metadata list each, plus the inventory read and write.
	if n := cnt.n.Load(); n > 2*3 {
		t.Fatalf("no-op re-sync of 31 objects in 2 kinds made %d API requests; want O(kinds)", n)
	}
	// The same revision again (the interval, Git unchanged): not even
	// rendered, no more requests, and nothing written: the inventory
	// stays as it was.
	_, before, err := e.inventory().Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The inventory records times to the second: a sync in the same
	// second as the last could not tell a written time from none.
	time.Sleep(1100 * time.Millisecond)
	cnt.n.Store(0)
	res = mustResync(t, r, e)
	if _, rendered := res.Phases["render"]; rendered || len(res.Applied) != 0 || res.Unchanged != 31 {
		t.Fatalf("re-sync of an unchanged revision: rendered %v, applied %v, unchanged %d", rendered, res.Applied, res.Unchanged)
	}
	if n := cnt.n.Load(); n > 2*2 {
		t.Fatalf("re-sync of an unchanged revision made %d API requests; want O(kinds), and no write", n)
	}
	if _, after, err := e.inventory().Load(context.Background()); err != nil || after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("a re-sync that changed nothing wrote the inventory (resourceVersion %s -> %s, %v)", before.ResourceVersion, after.ResourceVersion, err)
	}

	// Someone suspends a job by hand: the next sync puts it back.
	pj, _ := getPyJob(t, e, "team-drift", "job-07")
	pj.Spec.Suspend = ptr.To(true)
	if err := e.Client.Update(context.Background(), pj, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	res = mustResync(t, r, e)
	if strings.Join(res.Applied, ",") != "PyJob team-drift/job-07" {
		t.Fatalf("drift sync applied %v, want just job-07", res.Applied)
	}
	if pj, _ := getPyJob(t, e, "team-drift", "job-07"); ptr.Deref(pj.Spec.Suspend, false) {
		t.Fatal("manual edit not corrected")
	}

	// A deleted object comes back.
	if err := e.Client.Delete(context.Background(), pj); err != nil {
		t.Fatal(err)
	}
	res = mustResync(t, r, e)
	if strings.Join(res.Applied, ",") != "PyJob team-drift/job-07" {
		t.Fatalf("after delete, applied %v", res.Applied)
	}
}

func TestRestartReappliesNothing(t *testing.T) {
	e, _ := newEngine(t, "restart")
	r := newRepo(t).write("ns.yaml", namespaceYAML("team-restart")).write("a.yaml", pyjob("team-restart", "a", "img", 1))
	mustSync(t, r, e)
	before, _ := getPyJob(t, e, "team-restart", "a")
	fresh, _ := newEngine(t, "restart") // a new process: only the inventory in the cluster
	res := mustResync(t, r, fresh)
	after, _ := getPyJob(t, e, "team-restart", "a")
	if len(res.Applied)+len(res.Pruned) != 0 || after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("restart applied %v pruned %v (resourceVersion %s -> %s)", res.Applied, res.Pruned, before.ResourceVersion, after.ResourceVersion)
	}
	// The inventory says this build, with these settings, applied this
	// revision: the new process need not render it.
	if _, rendered := res.Phases["render"]; rendered {
		t.Fatal("the revision was rendered again after a restart with the same settings")
	}
	// Other settings may render it differently: it is rendered again.
	fresh.Opts.Concurrency++
	res = mustResync(t, r, fresh)
	if _, rendered := res.Phases["render"]; !rendered || len(res.Applied)+len(res.Pruned) != 0 {
		t.Fatalf("after a settings change: rendered %v, applied %v, pruned %v", rendered, res.Applied, res.Pruned)
	}
}

func TestPruneKeepsProtectedObjects(t *testing.T) {
	e, _ := newEngine(t, "protect")
	pvc := func(name string, ann string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: %s\n  namespace: team-protect\n%sspec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 1Gi\n", name, ann)
	}
	r := newRepo(t).
		write("ns.yaml", namespaceYAML("team-protect")).
		write("keep.yaml", strings.Replace(pyjob("team-protect", "keep-me", "img", 1), "metadata:\n", "metadata:\n  annotations:\n    trainops.dev/prune: disabled\n", 1)).
		write("data.yaml", pvc("results", "")).
		write("other.yaml", pvc("scratch", "")).
		write("user.yaml", strings.Replace(pyjob("team-protect", "user", "img", 1), "  gpu: 1\n", "  gpu: 1\n  outputPath: /out\n  storage:\n    output:\n      claimName: results\n", 1)).
		write("filler1.yaml", pyjob("team-protect", "f1", "img", 1)).
		write("filler2.yaml", pyjob("team-protect", "f2", "img", 1)).
		write("filler3.yaml", pyjob("team-protect", "f3", "img", 1))
	mustSync(t, r, e)
	r.remove("keep.yaml").remove("data.yaml").remove("other.yaml")
	res := mustSync(t, r, e)
	if strings.Join(res.Pruned, ",") != "PersistentVolumeClaim team-protect/scratch" {
		t.Errorf("pruned %v, want only the unused claim", res.Pruned)
	}
	if len(res.Skipped) != 2 {
		t.Errorf("skipped %v, want the annotated PyJob and the claim a PyJob uses", res.Skipped)
	}
	if _, err := getPyJob(t, e, "team-protect", "keep-me"); err != nil {
		t.Errorf("annotated PyJob pruned: %v", err)
	}
	if err := e.Client.Get(context.Background(), client.ObjectKey{Namespace: "team-protect", Name: "results"}, &corev1.PersistentVolumeClaim{}); err != nil {
		t.Errorf("claim holding a PyJob's output pruned: %v", err)
	}
}

func TestTwoInstancesLeaveEachOthersObjectsAlone(t *testing.T) {
	one, _ := newEngine(t, "one")
	two, _ := newEngine(t, "two")
	r1 := newRepo(t).write("ns.yaml", namespaceYAML("team-shared")).write("a.yaml", pyjob("team-shared", "from-one", "img", 1))
	r2 := newRepo(t).write("b.yaml", pyjob("team-shared", "from-two", "img", 1))
	mustSync(t, r1, one)
	mustSync(t, r2, two)
	res := mustSync(t, r2, two)
	if len(res.Pruned) != 0 {
		t.Fatalf("the second instance pruned %v", res.Pruned)
	}
	if _, err := getPyJob(t, one, "team-shared", "from-one"); err != nil {
		t.Fatalf("the first instance's PyJob is gone: %v", err)
	}
}
