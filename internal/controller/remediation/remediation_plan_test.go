// SPDX-License-Identifier: Apache-2.0

package remediation

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/gpuhealth"
)

var xid79 = healthOf([]gpuhealth.Problem{{Cause: "xid-79", Action: gpuhealth.OutOfService, Known: true}})

func planNode(name string, s *outOfService, h nodeHealth) nodeView {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	n.Status.NodeInfo.BootID = "boot-1"
	if s != nil {
		n.Spec.Taints = []corev1.Taint{{Key: gpuv1alpha1.RemediationTaintKey, Value: s.Cause, Effect: corev1.TaintEffectNoSchedule}}
		n.Spec.Unschedulable = true
	}
	return nodeView{node: n, state: s, health: h}
}

// TestPlanKeepsToMaxUnavailable: failing nodes go out by name up to
// maxUnavailable, a count or a percentage rounded up; the rest wait.
func TestPlanKeepsToMaxUnavailable(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		max      intstr.IntOrString
		nodes    int
		out      int
		waitFrom string
	}{
		{intstr.FromInt32(1), 4, 1, "n1"},
		{intstr.FromInt32(2), 4, 2, "n2"},
		{intstr.FromString("50%"), 4, 2, "n2"},
		{intstr.FromString("10%"), 4, 1, "n1"},
		{intstr.FromString("100%"), 4, 4, ""},
	} {
		var views []nodeView
		for i := range tc.nodes {
			views = append(views, planNode("n"+string(rune('0'+i)), nil, xid79))
		}
		p := planRemediation(gpuv1alpha1.RemediationSpec{MaxUnavailable: &tc.max}, views, now)
		if len(p.takeOut) != tc.out || len(p.waiting) != tc.nodes-tc.out {
			t.Errorf("maxUnavailable %s of %d: %d out, %d waiting; want %d out", tc.max.String(), tc.nodes, len(p.takeOut), len(p.waiting), tc.out)
		}
		if _, ok := p.waiting[tc.waitFrom]; tc.waitFrom != "" && !ok {
			t.Errorf("maxUnavailable %s: %s not waiting (%v)", tc.max.String(), tc.waitFrom, p.waiting)
		}
		if tc.out > 0 && !p.takeOut["n0"].Cordoned {
			t.Error("a schedulable node's record does not say trainops cordoned it")
		}
	}
	// Nodes already out count against the budget.
	out := &outOfService{Since: metav1.NewTime(now), Cause: "xid-48"}
	p := planRemediation(gpuv1alpha1.RemediationSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}, []nodeView{planNode("a", out, xid79), planNode("b", nil, xid79)}, now)
	if len(p.takeOut) != 0 || p.waiting["b"] != "xid-79" {
		t.Errorf("with one out and maxUnavailable 1: took out %v, waiting %v", p.takeOut, p.waiting)
	}
	msg, allIn := p.summary([]nodeView{planNode("a", out, xid79), planNode("b", nil, xid79)}, nil)
	if allIn || !strings.Contains(msg, "waiting, as maxUnavailable (1) GPU nodes are out of service: b (xid-79)") {
		t.Errorf("summary %q", msg)
	}
}

// TestPlanReturn: a node returns only once it reports healthy, after a
// driver restart or a reboot, for healthyFor, and after minOutOfService;
// any unknown or bad pass starts the healthy time again; an admin's label
// returns it at once.
func TestPlanReturn(t *testing.T) {
	t0 := time.Now()
	spec := gpuv1alpha1.RemediationSpec{HealthyFor: &metav1.Duration{Duration: time.Minute}, MinOutOfService: &metav1.Duration{Duration: 10 * time.Minute}}
	good := nodeHealth{}
	state := &outOfService{Since: metav1.NewTime(t0), Cause: "xid-79", BootID: "boot-1"}
	step := func(at time.Duration, h nodeHealth, restarted bool) remediationPlan {
		v := planNode("a", state, h)
		v.driverRestarted = restarted
		p := planRemediation(spec, []nodeView{v}, t0.Add(at))
		if s, ok := p.update["a"]; ok {
			state = s
		}
		return p
	}
	if p := step(time.Minute, good, false); len(p.giveBack) != 0 || len(p.awaitingReset) != 1 || state.HealthySince != nil {
		t.Fatalf("healthy without a reset: %+v, record %+v", p, state)
	}
	step(2*time.Minute, good, true)
	if state.HealthySince == nil || !state.HealthySince.Time.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("healthy since %v, want the first healthy pass after the restart", state.HealthySince)
	}
	// Flapping: a bad pass starts again.
	step(3*time.Minute, xid79, true)
	if state.HealthySince != nil {
		t.Fatal("a bad pass kept the healthy time")
	}
	step(4*time.Minute, good, true)
	if p := step(6*time.Minute, good, true); len(p.giveBack) != 0 {
		t.Fatal("returned before minOutOfService")
	}
	if p := step(10*time.Minute, good, true); !strings.Contains(p.giveBack["a"], "its driver pod restarted") {
		t.Fatalf("not returned after minOutOfService and healthyFor: %+v", p)
	}
	// A reboot counts as a reset.
	rebooted := planNode("a", &outOfService{Since: metav1.NewTime(t0), Cause: "xid-79", BootID: "boot-0", HealthySince: &metav1.Time{Time: t0}}, good)
	if p := planRemediation(spec, []nodeView{rebooted}, t0.Add(11*time.Minute)); !strings.Contains(p.giveBack["a"], "it rebooted") {
		t.Fatalf("a rebooted node did not return: %+v", p)
	}
	// An admin's label returns a failing node at once.
	marked := planNode("a", &outOfService{Since: metav1.NewTime(t0), Cause: "xid-79"}, xid79)
	marked.node.Labels[gpuv1alpha1.RemediatedLabel] = "true"
	if p := planRemediation(spec, []nodeView{marked}, t0); !strings.Contains(p.giveBack["a"], "an admin marked it") {
		t.Fatalf("marked node: %+v", p)
	}
}

// TestUnknownHealthIsNeverBad: an exporter that cannot be read leaves its
// node in service; a condition still takes it out.
func TestUnknownHealthIsNeverBad(t *testing.T) {
	now := time.Now()
	unknown := nodeHealth{health: healthUnknown, unknown: "its DCGM exporter: timeout"}
	v := planNode("a", nil, unknown)
	if p := planRemediation(gpuv1alpha1.RemediationSpec{}, []nodeView{v}, now); len(p.takeOut) != 0 {
		t.Fatalf("unknown health took the node out: %+v", p)
	}
	v.node.Status.Conditions = []corev1.NodeCondition{{Type: "GPUXidError", Status: corev1.ConditionTrue, Reason: "XID13"}, {Type: "Ready", Status: corev1.ConditionTrue}}
	if h := unknown.withConditions(v.node, []string{"GPUXidError"}); h.health != healthUnknown || len(h.problems) != 1 {
		t.Fatalf("a job-only XID condition: %+v", h)
	}
	v.node.Status.Conditions[0].Reason = "GPUFellOffTheBus"
	h := unknown.withConditions(v.node, []string{"GPUXidError"})
	if p := planRemediation(gpuv1alpha1.RemediationSpec{}, []nodeView{planNode("a", nil, h)}, now); p.takeOut["a"] == nil || p.takeOut["a"].Cause != "GPUXidError" {
		t.Fatalf("a True condition did not take the node out: %+v", p)
	}
	if h := unknown.withConditions(v.node, []string{"OtherCondition"}); h.health != healthUnknown {
		t.Fatal("a condition not listed counted")
	}
}

// TestRecordSurvivesEdits: a taint without a readable record is out of
// service since now, for its taint's cause.
func TestRecordSurvivesEdits(t *testing.T) {
	now := time.Now()
	n := planNode("a", &outOfService{Cause: "xid-79"}, nodeHealth{}).node
	n.Annotations = map[string]string{gpuv1alpha1.RemediationAnnotation: "{not json"}
	s := stateOf(n, now)
	if s == nil || s.Cause != "xid-79" || !s.Since.Time.Equal(now) {
		t.Fatalf("record %+v", s)
	}
	n.Spec.Taints = nil
	if stateOf(n, now) != nil {
		t.Fatal("a node without the taint is out of service")
	}
}

// TestFailedPodsOfANodeOutOfServiceAreNoted: each failed pod of a PyJob on
// a node just taken out gets a NodeOutOfService Event (an SREAgent with
// autoRepair reruns its PyJob); running pods and pods of no PyJob do not.
func TestFailedPodsOfANodeOutOfServiceAreNoted(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Deps: children.Deps{Recorder: rec}}
	pod := func(name string, phase corev1.PodPhase, pyjob string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", Labels: map[string]string{}}, Status: corev1.PodStatus{Phase: phase}}
		if pyjob != "" {
			p.Labels[builder.LabelPyJob] = pyjob
		}
		return p
	}
	n := planNode("gpu-1", nil, nodeHealth{}).node
	r.noteFailedPods(n, &outOfService{Cause: "xid-79"}, []corev1.Pod{pod("w0", corev1.PodFailed, "train"), pod("w1", corev1.PodRunning, "train"), pod("x", corev1.PodFailed, "")})
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if len(got) != 1 || !strings.Contains(got[0], gpuv1alpha1.NodeOutOfServiceReason) || !strings.Contains(got[0], "node gpu-1, where this pod ran, was taken out of service (xid-79)") {
		t.Fatalf("events %q", got)
	}
}
