// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// failedRun makes a PyJob whose run failed and its failed worker pod, on
// a node that no longer serves.
func failedRun(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pj := &trainingv1alpha1.PyJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: trainingv1alpha1.PyJobSpec{Image: "registry.trainops.test/trainer:1", Command: []string{"python", "train.py"}}}
	if err := admin.Create(ctx, pj); err != nil {
		t.Fatal(err)
	}
	pj.Status.Phase = trainingv1alpha1.PyJobFailed
	if err := admin.Status().Update(ctx, pj); err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-worker-0", Namespace: ns, Labels: map[string]string{builder.LabelPyJob: name}},
		Spec: corev1.PodSpec{NodeName: "gpu-gone", Containers: []corev1.Container{{Name: "trainer", Image: "registry.trainops.test/trainer:1"}}}}
	if err := admin.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodFailed
	if err := admin.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// nodeEvent records an Event on p as reporter says it took p's node out.
func nodeEvent(t *testing.T, p *corev1.Pod, reporter string) {
	t.Helper()
	ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: p.Name + "-", Namespace: p.Namespace},
		EventTime: metav1.NewMicroTime(time.Now()), ReportingController: reporter, ReportingInstance: "x", Action: "Remediate",
		Reason: gpuv1alpha1.NodeOutOfServiceReason, Type: corev1.EventTypeWarning, Note: "node gpu-gone, where this pod ran, was taken out of service (xid-79)",
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}}
	if err := admin.Create(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
}

func rerunOf(t *testing.T, ns, name string) string {
	t.Helper()
	pj := &trainingv1alpha1.PyJob{}
	if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pj); err != nil {
		t.Fatal(err)
	}
	return pj.Annotations[trainingv1alpha1.RerunAnnotation]
}

// TestRerunAfterNodeFailure: a PyJob whose worker failed on a node trainops
// then took out of service gets a new run, once, from an agent with
// autoRepair acting as its ServiceAccount; an Event that trainops did not
// record reruns nothing; an agent without autoRepair only reports, and may
// not patch PyJobs at all.
func TestRerunAfterNodeFailure(t *testing.T) {
	ctx := context.Background()
	ns, as := setup(t, true)
	failed := failedRun(t, ns, "train")
	nodeEvent(t, failed, gpuv1alpha1.EventReporter)
	forged := failedRun(t, ns, "other")
	nodeEvent(t, forged, "someone")

	a := newAgent(as, ns, true, false, 5)
	rep, err := a.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := rerunPrefix + string(failed.UID); rerunOf(t, ns, "train") != want {
		t.Fatalf("train: rerun %q, want %q (report %+v)", rerunOf(t, ns, "train"), want, rep)
	}
	if got := rerunOf(t, ns, "other"); got != "" {
		t.Fatalf("a forged Event reran other: %q", got)
	}
	if note := events(t, ns)["AutoRepair/train"]; !strings.Contains(note, "started a new run of PyJob train on healthy nodes") || !strings.Contains(note, "gpu-gone") {
		t.Fatalf("AutoRepair Event: %q", note)
	}
	if note := events(t, ns)[PodOnFailedNode+"/train"]; !strings.Contains(note, "taken out of service") {
		t.Fatalf("finding Event: %q", note)
	}
	// The finding and the rerun are in the SREAgent's status.
	st := agentStatusOf(t, ns, "ops")
	if len(st.Actions) != 1 || st.Actions[0].Action != "RerunPyJob" || st.Actions[0].Object != "PyJob/train" || !strings.Contains(st.Actions[0].Message, "gpu-gone") {
		t.Fatalf("status.actions %+v: want the rerun of PyJob/train", st.Actions)
	}
	if !hasFinding(st, PodOnFailedNode, "PyJob/train") || hasFinding(st, PodOnFailedNode, "PyJob/other") || !hasFinding(st, PyJobFailed, "PyJob/other") {
		t.Fatalf("status.findings %+v: want PodOnFailedNode for train only, and both failed", st.Findings)
	}
	written := st.ResourceVersion
	// The same failure reruns once, and an unchanged status is not
	// written again.
	if rep, err := a.RunOnce(ctx); err != nil || len(rep.Repaired) != 0 {
		t.Fatalf("second pass repaired %v (err %v)", rep.Repaired, err)
	}
	if rv := agentStatusOf(t, ns, "ops").ResourceVersion; rv != written {
		t.Errorf("the second pass wrote the SREAgent again (resourceVersion %s, then %s)", written, rv)
	}
	// A restarted agent, an hour on, keeps the earlier one's actions and
	// finding times.
	restarted := newAgent(as, ns, true, false, 5)
	restarted.Now = func() time.Time { return time.Now().Add(time.Hour) }
	if _, err := restarted.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	again := agentStatusOf(t, ns, "ops")
	if len(again.Actions) != 1 || again.Actions[0] != st.Actions[0] {
		t.Errorf("after a restart status.actions %+v, want %+v", again.Actions, st.Actions)
	}
	for i, f := range again.Findings {
		if i < len(st.Findings) && !f.Since.Equal(&st.Findings[i].Since) {
			t.Errorf("after a restart finding %s %s since %s, before %s", f.Kind, f.Object, f.Since, st.Findings[i].Since)
		}
	}
	// The agent's ServiceAccount writes no other SREAgent's status, in
	// its namespace or another.
	other := &aiopsv1alpha1.SREAgent{ObjectMeta: metav1.ObjectMeta{Name: "other-ops", Namespace: ns}}
	if err := admin.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	ns3, _ := setup(t, true)
	for _, key := range []client.ObjectKey{{Namespace: ns, Name: "other-ops"}, {Namespace: ns3, Name: "ops"}} {
		spy := New(as, Options{Namespace: key.Namespace, SREAgent: key.Name, Instance: "spy"}, logr.Discard())
		spy.resumed = true // straight to the write
		spy.acted(Finding{Object: Ref{Kind: "Pod", Name: "x"}}, "DeletePod", "forged")
		if err := spy.writeStatus(ctx, nil); !apierrors.IsForbidden(err) {
			t.Errorf("writing the status of SREAgent %s: err %v, want Forbidden", key, err)
		}
		if st := agentStatusOf(t, key.Namespace, key.Name); len(st.Actions) != 0 || len(st.Findings) != 0 {
			t.Errorf("SREAgent %s has the agent's status: %+v", key, st.SREAgentStatus)
		}
	}

	ns2, watcher := setup(t, false)
	failed2 := failedRun(t, ns2, "train")
	nodeEvent(t, failed2, gpuv1alpha1.EventReporter)
	if _, err := newAgent(watcher, ns2, false, false, 5).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rerunOf(t, ns2, "train"); got != "" {
		t.Fatalf("an agent without autoRepair reran: %q", got)
	}
	if note := events(t, ns2)[PodOnFailedNode+"/train"]; note == "" {
		t.Fatal("an agent without autoRepair did not report the finding")
	}
	pj := &trainingv1alpha1.PyJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns2, Name: "train"}}
	if err := watcher.Patch(ctx, pj, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"trainops.dev/rerun":"x"}}}`))); !apierrors.IsForbidden(err) {
		t.Fatalf("an agent without autoRepair patching a PyJob: err %v, want Forbidden", err)
	}
}

// sreAgentStatus is an SREAgent's status and resourceVersion.
type sreAgentStatus struct {
	aiopsv1alpha1.SREAgentStatus
	ResourceVersion string
}

func agentStatusOf(t *testing.T, ns, name string) sreAgentStatus {
	t.Helper()
	a := &aiopsv1alpha1.SREAgent{}
	if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, a); err != nil {
		t.Fatal(err)
	}
	return sreAgentStatus{a.Status, a.ResourceVersion}
}

func hasFinding(st sreAgentStatus, kind, object string) bool {
	for _, f := range st.Findings {
		if f.Kind == kind && f.Object == object && f.Message != "" && !f.Since.IsZero() {
			return true
		}
	}
	return false
}
