// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// BuildTrainops builds the trainops binary into a temporary folder, for
// tests that run it as a process (demo, benchmarks, faults, replicas).
func BuildTrainops(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "trainops")
	build := exec.Command("go", "build", "-o", bin, "github.com/trainops/trainops/cmd/trainops")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build trainops: %v\n%s", err, out)
	}
	return bin
}

// Eventually polls check until it returns nil, failing the test with the
// last error after timeout.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("not true after %s: %v", timeout, err)
}

// AfterProof is how a test says that something did not happen. It first
// waits, up to timeout, for proof that the controller looked at the
// change (a metric moved, an Event, a status revision, a reconcile that
// returned), and only then runs nothingElse once, failing the test with
// its error. A check made before such proof passes whether or not the
// controller looked, as it does on a slow machine.
func AfterProof(t testing.TB, timeout time.Duration, proof, nothingElse func() error) {
	t.Helper()
	Eventually(t, timeout, proof)
	if err := nothingElse(); err != nil {
		t.Fatal(err)
	}
}

// CacheCaughtUp waits until cached (a manager's client) holds each of
// objs at the resourceVersion live (the API server) has: proof that a
// reconciler reading the cache sees what the test last wrote.
func CacheCaughtUp(t testing.TB, cached, live client.Reader, objs ...client.Object) {
	t.Helper()
	Eventually(t, 30*time.Second, func() error {
		for _, o := range objs {
			l := o.DeepCopyObject().(client.Object)
			c := o.DeepCopyObject().(client.Object)
			if err := live.Get(context.Background(), client.ObjectKeyFromObject(o), l); err != nil {
				return err
			}
			if err := cached.Get(context.Background(), client.ObjectKeyFromObject(o), c); err != nil {
				return err
			}
			if c.GetResourceVersion() != l.GetResourceVersion() {
				return fmt.Errorf("the cache holds %s at %s, the API server at %s", client.ObjectKeyFromObject(o), c.GetResourceVersion(), l.GetResourceVersion())
			}
		}
		return nil
	})
}

// Progressing waits until check returns nil, as long as the work moves:
// it fails when the state check reports has not changed for idle, or
// after limit whatever happens. A loaded machine makes slow work slower,
// and the test with it, not red; work that stops fails it as soon as
// idle has passed.
func Progressing(t testing.TB, idle, limit time.Duration, check func() (state string, err error)) {
	t.Helper()
	start := time.Now()
	last, moved := "", start
	for {
		state, err := check()
		if err == nil {
			return
		}
		now := time.Now()
		if state != last {
			last, moved = state, now
		}
		switch {
		case now.Sub(moved) > idle:
			t.Fatalf("no progress for %s (after %s): %v", idle, now.Sub(start).Round(time.Second), err)
		case now.Sub(start) > limit:
			t.Fatalf("not done after %s, still moving: %v", limit, err)
		}
		time.Sleep(time.Second)
	}
}

// Golden holds got against the file at path: with update (a test's
// -update flag) it writes got there first. regenerate says how to rewrite
// the file on purpose.
func Golden(t testing.TB, path string, got []byte, update bool, regenerate string) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (%s)", err, regenerate)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Fatalf("%s differs (-file +got); %s if intended:\n%s", path, regenerate, d)
	}
}

// FilesUnder lists everything beneath dir (dir itself aside): what a test
// of "nothing was written there" expects to be empty.
func FilesUnder(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil && p != dir {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// CloneConfigs is the configuration file of every bare clone (a folder
// repo.git) beneath dir, each after its path: what a test of "a clone's
// configuration did not change" compares.
func CloneConfigs(dir string) string {
	var b strings.Builder
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "repo.git" {
			raw, _ := os.ReadFile(filepath.Join(p, "config"))
			b.WriteString(p + "\n" + string(raw))
		}
		return nil
	})
	return b.String()
}

// Update reads obj afresh through c, applies change and writes it,
// retrying on conflicts with the reconcilers' own writes (status, labels),
// so a test's edit never races them.
func Update[T client.Object](t testing.TB, c client.Client, obj T, change func(T)) {
	t.Helper()
	ctx := context.Background()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change(obj)
		return c.Update(ctx, obj)
	}); err != nil {
		t.Fatal(err)
	}
}

// NewNamespace creates, through c, a namespace for one test.
func NewNamespace(t testing.TB, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// PyJobChildren is builder.ForPyJob's answer for pj, which must build.
func PyJobChildren(t testing.TB, pj *trainingv1alpha1.PyJob) builder.PyJobChildren {
	t.Helper()
	c, err := builder.ForPyJob(pj)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Metric is the value of the metrics named name in this process's
// controller-runtime registry whose label is value (every series when
// label is empty), summed: a counter's
// or gauge's value, a histogram's count of observations; 0 when none.
func Metric(t testing.TB, name, label, value string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label != "" && !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == label && l.GetValue() == value }) {
				continue
			}
			switch {
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// PyJobAuthor is a client acting as a user who may create, read and
// update PyJobs in ns and nothing else: no pods, no Jobs, no Secrets
// (checked: it may not create a pod). admin grants it.
func (e *Env) PyJobAuthor(t testing.TB, admin client.Client, ns string) client.Client {
	t.Helper()
	ctx := context.Background()
	const user = "pyjob-author"
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{trainingv1alpha1.GroupVersion.Group}, Resources: []string{"pyjobs"}, Verbs: []string{"create", "get", "list", "update"},
	}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	as, err := client.New(e.Impersonate(user), client.Options{Scheme: admin.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := as.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "direct"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}); !apierrors.IsForbidden(err) {
		t.Fatalf("the PyJob author creating a pod: %v, want Forbidden", err)
	}
	return as
}
