// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/render"
)

const crashImage = "registry.trainops.test/app:crash-loop"

var (
	env   *testenv.Env
	admin client.Client
)

func TestMain(m *testing.M) {
	render.ServeIfChild() // a test that renders starts this binary as the child
	os.Exit(testenv.Main(m, testenv.Options{Full: true, GPUNodes: 1, CPUNodes: 1,
		Stages: []string{testenv.CrashLoopStage(crashImage, "CrashLoopBackOff", 5, "Error")}}, &env,
		func(context.Context, *testenv.Env) (err error) {
			admin, err = client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
			return err
		}))
}

// setup makes a namespace with an SREAgent's ServiceAccount, Role and
// RoleBinding, exactly as the SREAgent reconciler builds them, and returns
// a client acting as that ServiceAccount.
func setup(t *testing.T, autoRepair bool) (string, client.Client) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-"}}
	if err := admin.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	a := &aiopsv1alpha1.SREAgent{ObjectMeta: metav1.ObjectMeta{Name: "ops", Namespace: ns.Name}, Spec: aiopsv1alpha1.SREAgentSpec{AutoRepair: autoRepair, MonitorInterval: 15}}
	if err := admin.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	c := builder.ForSREAgent(a, builder.Options{AgentImage: "x"})
	for _, o := range []client.Object{c.ServiceAccount, c.Role, c.RoleBinding} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	user, groups := testenv.ServiceAccountUser(ns.Name, c.ServiceAccount.Name)
	as, err := client.New(env.Impersonate(user, groups...), client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name, as
}

func crashDeployment(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: crashImage}}}}},
	}
	if err := admin.Create(context.Background(), d); err != nil {
		t.Fatal(err)
	}
}

func barePod(t *testing.T, ns, name string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: crashImage}}}}
	if err := admin.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// crashLooping lists the pods in ns that kwok has put in CrashLoopBackOff.
func crashLooping(t *testing.T, ns string, want int) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	testenv.Eventually(t, 60*time.Second, func() error {
		var pods corev1.PodList
		if err := admin.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		out = nil
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Waiting != nil {
				out = append(out, p)
			}
		}
		if len(out) != want {
			return fmt.Errorf("%d crash-looping pods, want %d", len(out), want)
		}
		return nil
	})
	return out
}

func events(t *testing.T, ns string) map[string]string {
	t.Helper()
	var list eventsv1.EventList
	if err := admin.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range list.Items {
		if e.ReportingController == "trainops.dev/agent" {
			name := e.Regarding.Name
			if e.Related != nil {
				name = e.Related.Name
			}
			out[e.Reason+"/"+name] = e.Note
		}
	}
	return out
}

func newAgent(c client.Client, ns string, autoRepair, dryRun bool, maxRepairs int) *Agent {
	return New(c, Options{Namespace: ns, Interval: time.Second, AutoRepair: autoRepair, DryRun: dryRun, MaxRepairs: maxRepairs, Thresholds: DefaultThresholds(), Instance: "test-agent", SREAgent: "ops"}, logr.Discard())
}

func TestAutoRepairRecreatesOwnedPodsOnly(t *testing.T) {
	ns, as := setup(t, true)
	other, _ := setup(t, true)
	crashDeployment(t, ns, "trainer", 1)
	barePod(t, ns, "lonely")
	barePod(t, other, "elsewhere")
	pods := crashLooping(t, ns, 2)
	crashLooping(t, other, 1)
	var owned corev1.Pod
	for _, p := range pods {
		if p.Name != "lonely" {
			owned = p
		}
	}
	ctx := context.Background()
	a := newAgent(as, ns, true, false, 5)
	rep, err := a.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rep.Repaired, ",") != owned.Name {
		t.Fatalf("repaired %v, want only the Deployment's pod %s", rep.Repaired, owned.Name)
	}
	if len(rep.New) != 2 {
		t.Errorf("new findings %+v, want both crash loops", rep.New)
	}
	// The ReplicaSet recreates the deleted pod; the bare pod stays.
	testenv.Eventually(t, 30*time.Second, func() error {
		var pods corev1.PodList
		if err := admin.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": "trainer"}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.UID != owned.UID && p.DeletionTimestamp == nil {
				return nil
			}
		}
		return fmt.Errorf("no replacement pod yet")
	})
	if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "lonely"}, &corev1.Pod{}); err != nil {
		t.Fatalf("pod without an owner was deleted: %v", err)
	}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: other, Name: "elsewhere"}, &corev1.Pod{}); err != nil {
		t.Fatalf("pod in another namespace touched: %v", err)
	}
	ev := events(t, ns)
	if _, ok := ev["AutoRepair/"+owned.Name]; !ok {
		t.Errorf("no AutoRepair event: %v", ev)
	}
	if note := ev["CrashLoopBackOff/lonely"]; !strings.Contains(note, "no controller") {
		t.Errorf("bare pod's event %q does not say why it is left alone", note)
	}

	// The same problem is not announced again.
	rep, err = a.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.New {
		if f.Object.Name == "lonely" {
			t.Errorf("lonely announced twice")
		}
	}

	// The agent's ServiceAccount cannot act in another namespace.
	stranger := newAgent(as, other, true, false, 5)
	if _, err := stranger.RunOnce(ctx); !apierrors.IsForbidden(err) {
		t.Fatalf("acting in another namespace: %v, want Forbidden", err)
	}
}

func TestRepairLimitAndDryRun(t *testing.T) {
	ns, as := setup(t, true)
	crashDeployment(t, ns, "fleet", 3)
	pods := crashLooping(t, ns, 3)
	ctx := context.Background()

	rep, err := newAgent(as, ns, true, true, 5).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Repaired) != 3 {
		t.Fatalf("dry run reported %v, want all 3", rep.Repaired)
	}
	for _, p := range pods {
		cur := &corev1.Pod{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(&p), cur); err != nil || cur.UID != p.UID || cur.DeletionTimestamp != nil {
			t.Fatalf("dry run deleted %s (%v)", p.Name, err)
		}
	}
	if note := events(t, ns)["AutoRepair/"+pods[0].Name]; !strings.Contains(note, "dry run: would delete") {
		t.Errorf("dry-run event %q", note)
	}

	rep, err = newAgent(as, ns, true, false, 1).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Repaired) != 1 || len(rep.Skipped) != 2 {
		t.Fatalf("limit 1: repaired %v skipped %v", rep.Repaired, rep.Skipped)
	}
}

func TestWithoutAutoRepairTheAgentOnlyReports(t *testing.T) {
	ns, as := setup(t, false)
	crashDeployment(t, ns, "trainer", 1)
	pods := crashLooping(t, ns, 1)
	ctx := context.Background()
	rep, err := newAgent(as, ns, false, false, 5).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Repaired) != 0 || len(rep.New) != 1 {
		t.Fatalf("repaired %v new %v", rep.Repaired, rep.New)
	}
	// Its Role cannot delete pods at all.
	if err := as.Delete(ctx, &pods[0]); !apierrors.IsForbidden(err) {
		t.Fatalf("delete without autoRepair: %v, want Forbidden", err)
	}
}

func TestRunServesHealthAndMetricsAndStops(t *testing.T) {
	ns, as := setup(t, false)
	barePod(t, ns, "lonely")
	crashLooping(t, ns, 1)
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	a := newAgent(as, ns, false, false, 1)
	a.Opts.Listen = addr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	testenv.Eventually(t, 20*time.Second, func() error {
		for path, want := range map[string]string{"/healthz": "ok", "/metrics": `trainops_agent_findings_total{kind="CrashLoopBackOff"} 1`} {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(b), want) {
				return fmt.Errorf("%s lacks %q", path, want)
			}
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop")
	}
}

func TestGPUFindingsBecomeEvents(t *testing.T) {
	ns, as := setup(t, false)
	body, err := os.ReadFile("../../testdata/dcgm/xid-error.prom")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }))
	defer srv.Close()
	a := newAgent(as, ns, false, false, 1)
	a.Opts.GPU, a.Opts.DCGMURL = true, srv.URL+"/metrics"
	rep, err := a.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.New) != 1 || rep.New[0].Kind != GPUXidError {
		t.Fatalf("findings %+v", rep.New)
	}
	if note := events(t, ns)["GPUXidError/gpu-node-1"]; !strings.Contains(note, "XID 79 (GPU has fallen off the bus)") || !strings.Contains(note, "GPU 1") {
		t.Fatalf("GPU event %q", note)
	}
}

func TestFailedPyJobsAreFindings(t *testing.T) {
	pjs := []trainingv1alpha1.PyJob{
		{ObjectMeta: metav1.ObjectMeta{Name: "ok", Namespace: "ml"}, Status: trainingv1alpha1.PyJobStatus{Phase: trainingv1alpha1.PyJobSucceeded}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "ml"}, Status: trainingv1alpha1.PyJobStatus{Phase: trainingv1alpha1.PyJobFailed, Message: "BackoffLimitExceeded: Job has reached the specified backoff limit"}},
	}
	fs := InspectPyJobs(pjs)
	if len(fs) != 1 || fs[0].Object.Name != "bad" || !strings.Contains(fs[0].Message, "BackoffLimitExceeded") || !strings.Contains(fs[0].Message, "pyjob-name=bad") {
		t.Fatalf("findings %+v", fs)
	}
}
