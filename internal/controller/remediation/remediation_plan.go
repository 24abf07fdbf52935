// SPDX-License-Identifier: Apache-2.0

package remediation

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/controller/gpustack"
	"github.com/trainops/trainops/internal/gpuhealth"
)

// outOfService is what trainops keeps on a node it took out of service,
// in its RemediationAnnotation: all a later pass, or another replica after
// a fail-over, needs to return it.
type outOfService struct {
	Since metav1.Time `json:"since"`
	Cause string      `json:"cause"`
	// Cordoned: trainops cordoned the node (it was schedulable), so it
	// uncordons it on return.
	Cordoned bool `json:"cordoned,omitempty"`
	// BootID is the node's boot ID when it went out: another one means it
	// rebooted.
	BootID string `json:"bootID,omitempty"`
	// HealthySince is when the node, after its driver pod restarted or it
	// rebooted, began to report healthy.
	HealthySince *metav1.Time `json:"healthySince,omitempty"`
}

// ownTaint is trainops's taint on n, if any.
func ownTaint(n *corev1.Node) (corev1.Taint, bool) {
	for _, t := range n.Spec.Taints {
		if t.Key == gpuv1alpha1.RemediationTaintKey {
			return t, true
		}
	}
	return corev1.Taint{}, false
}

// stateOf is the out-of-service record of n: nil when trainops's taint is
// not on it. A taint without a readable record (someone edited it) is
// taken as out of service since now, for its taint's cause.
func stateOf(n *corev1.Node, now time.Time) *outOfService {
	taint, ok := ownTaint(n)
	if !ok {
		return nil
	}
	s := &outOfService{}
	if raw := n.Annotations[gpuv1alpha1.RemediationAnnotation]; raw == "" || json.Unmarshal([]byte(raw), s) != nil || s.Since.IsZero() {
		s = &outOfService{Since: metav1.NewTime(now), Cause: taint.Value, BootID: n.Status.NodeInfo.BootID}
	}
	return s
}

// health is what one pass learned of a node's GPUs.
type health int

const (
	healthGood health = iota
	healthUnknown
	healthBad
)

// nodeHealth is a node's health and the problems behind it.
type nodeHealth struct {
	health health
	// problems are every problem found, acted on or only reported.
	problems []gpuhealth.Problem
	// unknown says why the health is unknown.
	unknown string
}

// healthOf is the health the problems make: bad when one takes the node
// out of service.
func healthOf(problems []gpuhealth.Problem) nodeHealth {
	h := nodeHealth{problems: problems}
	if _, bad := h.firstOutOfService(); bad {
		h.health = healthBad
	}
	return h
}

// withConditions adds what a health reporter's conditions say to what the
// exporter said: a condition can make a node bad whatever the exporter
// says, never good.
func (h nodeHealth) withConditions(n *corev1.Node, types []string) nodeHealth {
	var problems []gpuhealth.Problem
	for _, c := range n.Status.Conditions {
		if c.Status == corev1.ConditionTrue && slices.Contains(types, string(c.Type)) {
			problems = append(problems, gpuhealth.FromCondition(c))
		}
	}
	if len(problems) == 0 {
		return h
	}
	all := healthOf(append(slices.Clone(h.problems), problems...))
	if all.health != healthBad {
		all.health, all.unknown = h.health, h.unknown
	}
	return all
}

// firstOutOfService is the first problem that takes the node out.
func (h nodeHealth) firstOutOfService() (gpuhealth.Problem, bool) {
	for _, p := range h.problems {
		if p.Action == gpuhealth.OutOfService {
			return p, true
		}
	}
	return gpuhealth.Problem{}, false
}

// nodeView is one GPU node as a pass sees it.
type nodeView struct {
	node   *corev1.Node
	state  *outOfService
	health nodeHealth
	// driverRestarted: a driver pod on the node started after it went out.
	driverRestarted bool
	// pods on the node, when this pass listed them already (nil if not).
	pods []corev1.Pod
}

// remediationPlan is what one pass does to the GPU nodes.
type remediationPlan struct {
	// takeOut are the nodes to taint, cordon and drain, with their record.
	takeOut map[string]*outOfService
	// giveBack are the nodes to return, with why.
	giveBack map[string]string
	// update are records of nodes still out that changed.
	update map[string]*outOfService
	// waiting are failing nodes maxUnavailable keeps in service, with
	// their cause.
	waiting map[string]string
	// awaitingReset are nodes out that report healthy but whose driver
	// pod has not restarted nor has the node rebooted.
	awaitingReset []string
	// limit is maxUnavailable as a number of nodes.
	limit int
}

// remediationTimes are the durations of a remediation spec, defaulted.
type remediationTimes struct {
	healthyFor, minOutOfService time.Duration
}

func timesOf(r gpuv1alpha1.RemediationSpec) remediationTimes {
	return remediationTimes{healthyFor: gpustack.DurationOr(r.HealthyFor, 5*time.Minute), minOutOfService: gpustack.DurationOr(r.MinOutOfService, 10*time.Minute)}
}

// planRemediation decides, from the nodes' health and records, which
// nodes go out, which come back and which wait. It is pure: the
// reconciler carries it out.
func planRemediation(spec gpuv1alpha1.RemediationSpec, views []nodeView, now time.Time) remediationPlan {
	p := remediationPlan{takeOut: map[string]*outOfService{}, giveBack: map[string]string{}, update: map[string]*outOfService{}, waiting: map[string]string{},
		limit: gpustack.NodeCount(spec.MaxUnavailable, intstr.FromInt32(1), len(views))}
	times := timesOf(spec)
	out := 0
	var failing []nodeView
	for _, v := range views {
		if v.state == nil {
			if _, bad := v.health.firstOutOfService(); bad {
				failing = append(failing, v)
			}
			continue
		}
		if why, back := p.returns(v, times, now); back {
			p.giveBack[v.node.Name] = why
			continue
		}
		out++
	}
	sort.Slice(failing, func(i, j int) bool { return failing[i].node.Name < failing[j].node.Name })
	for _, v := range failing {
		prob, _ := v.health.firstOutOfService()
		if out >= p.limit {
			p.waiting[v.node.Name] = prob.Cause
			continue
		}
		out++
		p.takeOut[v.node.Name] = &outOfService{Since: metav1.NewTime(now), Cause: prob.Cause, Cordoned: !v.node.Spec.Unschedulable, BootID: v.node.Status.NodeInfo.BootID}
	}
	return p
}

// returns decides whether a node out of service comes back, recording in
// p.update when it began to report healthy.
func (p *remediationPlan) returns(v nodeView, times remediationTimes, now time.Time) (string, bool) {
	if v.node.Labels[gpuv1alpha1.RemediatedLabel] == "true" {
		return fmt.Sprintf("an admin marked it %s=true", gpuv1alpha1.RemediatedLabel), true
	}
	s := *v.state
	reset := v.driverRestarted || (s.BootID != "" && v.node.Status.NodeInfo.BootID != s.BootID)
	switch {
	case v.health.health != healthGood:
		s.HealthySince = nil
	case !reset:
		p.awaitingReset = append(p.awaitingReset, v.node.Name)
		s.HealthySince = nil
	case s.HealthySince == nil:
		s.HealthySince = &metav1.Time{Time: now}
	}
	if s.HealthySince != nil && now.Sub(s.HealthySince.Time) >= times.healthyFor && now.Sub(s.Since.Time) >= times.minOutOfService {
		return fmt.Sprintf("it reports healthy since %s, after %s", s.HealthySince.UTC().Format(time.RFC3339), resetWords(v.driverRestarted)), true
	}
	if !equalTimes(s.HealthySince, v.state.HealthySince) {
		p.update[v.node.Name] = &s
	}
	return "", false
}

func resetWords(driverRestarted bool) string {
	if driverRestarted {
		return "its driver pod restarted"
	}
	return "it rebooted"
}

func equalTimes(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}

// summary is the message of the ClusterPolicy's GPUNodesHealthy
// condition: what is out and why, what waits, what is unknown.
func (p remediationPlan) summary(views []nodeView, drains map[string]gpustack.DrainResult) (string, bool) {
	var out, unknown []string
	for _, v := range views {
		name := v.node.Name
		if _, back := p.giveBack[name]; back {
			continue
		}
		s := v.state
		if t, ok := p.takeOut[name]; ok {
			s = t
		}
		if s != nil {
			line := fmt.Sprintf("%s (%s, since %s", name, s.Cause, s.Since.UTC().Format(time.RFC3339))
			if d, ok := drains[name]; ok && d.Message() != "" {
				line += "; " + d.Message()
			}
			if slices.Contains(p.awaitingReset, name) {
				line += "; healthy, waiting for its driver pod to restart or the node to reboot"
			}
			out = append(out, line+")")
		} else if v.health.health == healthUnknown {
			unknown = append(unknown, fmt.Sprintf("%s (%s)", name, v.health.unknown))
		}
	}
	var waiting []string
	for _, name := range slices.Sorted(maps.Keys(p.waiting)) {
		waiting = append(waiting, fmt.Sprintf("%s (%s)", name, p.waiting[name]))
	}
	var parts []string
	if len(out) > 0 {
		parts = append(parts, "out of service: "+strings.Join(out, ", "))
	}
	if len(waiting) > 0 {
		parts = append(parts, fmt.Sprintf("waiting, as maxUnavailable (%d) GPU nodes are out of service: %s", p.limit, strings.Join(waiting, ", ")))
	}
	if len(unknown) > 0 {
		parts = append(parts, "health unknown, left in service: "+strings.Join(unknown, ", "))
	}
	if len(out) == 0 && len(waiting) == 0 {
		msg := fmt.Sprintf("all %d GPU nodes in service", len(views))
		if len(unknown) > 0 {
			msg += "; " + parts[len(parts)-1]
		}
		return msg, true
	}
	return strings.Join(parts, "; "), false
}
