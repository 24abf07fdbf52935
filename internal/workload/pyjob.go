// SPDX-License-Identifier: Apache-2.0

package workload

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// refusedSecret ends the message refusing a Secret under refuseSecretRefs.
const refusedSecret = "reading a Secret is refused here (refuseSecretRefs)"

// tolerateAllMessage refuses a toleration of every taint.
const tolerateAllMessage = "tolerating every taint (operator Exists, no key) puts training pods on control-plane and cordoned nodes: name the taint's key (or set allowTolerateAllTaints)"

// ReservedTaints are the taints that keep workloads off a node on
// purpose: a PyJob may not tolerate them by name unless
// allowReservedTolerations says so.
var ReservedTaints = []string{
	"node-role.kubernetes.io/control-plane",
	"node-role.kubernetes.io/master",
	corev1.TaintNodeUnschedulable,
	gpuv1alpha1.RemediationTaintKey,
}

// nvidiaEnvPrefix starts every variable the NVIDIA container runtime reads
// to choose a container's GPUs and driver capabilities.
const nvidiaEnvPrefix = "NVIDIA_"

// nvidiaEnvMessage refuses one of the NVIDIA runtime's variables.
const nvidiaEnvMessage = "the NVIDIA container runtime reads %s to choose the container's GPUs and driver features, outside the GPU limit the scheduler counts: refused (ask for GPUs with spec.gpu)"

// PyJob returns what the policy refuses of pj, one "field: why (setting)"
// message each; nil when nothing. nsLevel is the
// pod-security.kubernetes.io/enforce label of pj's namespace ("" when it
// has none): a stricter label than the policy's level wins.
func (p Policy) PyJob(pj *trainingv1alpha1.PyJob, nsLevel string) []string {
	var out []string
	s := &pj.Spec
	if s.PriorityClassName != "" {
		if m := p.priorityClass(s.PriorityClassName); m != "" {
			out = append(out, "spec.priorityClassName: "+m)
		}
	}
	if s.WorkloadPriorityClassName != "" {
		if m := p.workloadPriorityClass(s.WorkloadPriorityClassName); m != "" {
			out = append(out, "spec.workloadPriorityClassName: "+m)
		}
	}
	out = append(out, p.tolerations("spec.tolerations", s.Tolerations)...)
	for i, e := range s.Env {
		at := fmt.Sprintf("spec.env[%d]", i)
		if strings.HasPrefix(e.Name, nvidiaEnvPrefix) {
			out = append(out, at+".name: "+fmt.Sprintf(nvidiaEnvMessage, e.Name))
		}
		if p.RefuseSecretRefs && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out = append(out, at+".valueFrom.secretKeyRef: "+refusedSecret)
		}
	}
	user, err := builder.DecodeTemplate(s.Template)
	if err != nil {
		return append(out, err.Error())
	}
	job, err := builder.JobFor(pj)
	if err != nil {
		return append(out, err.Error())
	}
	if user != nil {
		out = append(out, p.checkTemplate(user)...)
	}
	return append(out, p.podSecurity(&job.Spec.Template, nsLevel)...)
}

// tolerations is what the policy refuses of a list of tolerations at
// field.
func (p Policy) tolerations(field string, list []corev1.Toleration) []string {
	var out []string
	for i, t := range list {
		at := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case t.Key == "" && t.Operator == corev1.TolerationOpExists:
			if !p.AllowTolerateAll {
				out = append(out, at+": "+tolerateAllMessage)
			}
		case slices.Contains(ReservedTaints, t.Key) && !p.AllowReservedTolerations:
			out = append(out, fmt.Sprintf("%s.key: %s keeps workloads off a node on purpose (control plane, cordoned, or taken out of service for failing GPUs): tolerating it is refused (allowReservedTolerations)", at, t.Key))
		}
	}
	return out
}
