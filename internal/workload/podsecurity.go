// SPDX-License-Identifier: Apache-2.0

package workload

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	psapi "k8s.io/pod-security-admission/api"
	pspolicy "k8s.io/pod-security-admission/policy"

	"github.com/trainops/trainops/internal/config"
)

// EnforceLabel is the namespace label with which Kubernetes' Pod Security
// admission enforces a level: trainops takes it when it is stricter than
// its own setting, never when it is laxer (a namespace a team declares in
// Git could carry it).
const EnforceLabel = psapi.EnforceLevelLabel

// evaluator is Kubernetes' own Pod Security Standards evaluator, with the
// checks of the release trainops's libraries are at.
var evaluator = sync.OnceValues(func() (pspolicy.Evaluator, error) {
	return pspolicy.NewEvaluator(pspolicy.DefaultChecks(), nil)
})

// Level is the Pod Security level a PyJob of a namespace labelled nsLevel
// is held to: the stricter of the policy's and the label's (an unknown
// label counts as restricted, as Pod Security admission reads it).
func (p Policy) Level(nsLevel string) string {
	level := p.PodSecurityLevel
	if level == "" {
		level = config.PodSecurityBaseline
	}
	if nsLevel != "" {
		if _, err := psapi.ParseLevel(nsLevel); err != nil {
			nsLevel = config.PodSecurityRestricted
		}
		level = config.StricterPodSecurity(level, nsLevel)
	}
	return level
}

// podSecurity evaluates the merged pod with the Pod Security Standards at
// the level nsLevel and the policy make. The powers trainops's own rules
// judge (privileged, added capabilities, hostPath, host namespaces) are
// taken out of the pod first: they are refused by those rules unless a
// setting allows them, which is how the allow* settings are exceptions on
// top of the level.
func (p Policy) podSecurity(pod *corev1.PodTemplateSpec, nsLevel string) []string {
	level := p.Level(nsLevel)
	if level == config.PodSecurityPrivileged {
		return nil
	}
	ev, err := evaluator()
	if err != nil {
		return []string{"spec.template: the Pod Security Standards evaluator: " + err.Error()}
	}
	judged := withoutJudgedPowers(pod)
	setting := "podSecurityLevel"
	if level != p.Level("") {
		setting = "the namespace's " + EnforceLabel + " label"
	}
	var out []string
	for _, r := range ev.EvaluatePod(psapi.LevelVersion{Level: psapi.Level(level), Version: psapi.LatestVersion()}, &judged.ObjectMeta, &judged.Spec) {
		if r.Allowed {
			continue
		}
		what := r.ForbiddenReason
		if r.ForbiddenDetail != "" {
			what += " (" + r.ForbiddenDetail + ")"
		}
		out = append(out, fmt.Sprintf("spec.template.spec: %s: refused by the Pod Security Standards at level %s (%s)", what, level, setting))
	}
	return out
}

// withoutJudgedPowers is a copy of pod without the powers trainops's own
// rules judge.
func withoutJudgedPowers(pod *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	out := pod.DeepCopy()
	s := &out.Spec
	s.HostNetwork, s.HostPID, s.HostIPC = false, false, false
	var vols []corev1.Volume
	for _, v := range s.Volumes {
		if v.HostPath == nil {
			vols = append(vols, v)
		}
	}
	s.Volumes = vols
	clear := func(sc *corev1.SecurityContext) {
		if sc == nil {
			return
		}
		sc.Privileged = nil
		if sc.Capabilities != nil {
			sc.Capabilities.Add = nil
		}
	}
	for i := range s.InitContainers {
		clear(s.InitContainers[i].SecurityContext)
	}
	for i := range s.Containers {
		clear(s.Containers[i].SecurityContext)
	}
	for i := range s.EphemeralContainers {
		clear(s.EphemeralContainers[i].SecurityContext)
	}
	return out
}
