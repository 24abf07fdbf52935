// SPDX-License-Identifier: Apache-2.0

// Package agent is the SRE agent an SREAgent deploys (`trainops agent`):
// every monitorInterval it inspects its namespace's pods and PyJobs, and
// with gpuEnable the DCGM exporter's GPU metrics, announces each problem once
// as an Event, a metric and a log line, and with autoRepair deletes pods
// stuck in CrashLoopBackOff so their controller recreates them.
package agent

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
)

// Kinds of finding, also the Event reasons.
const (
	CrashLoop      = "CrashLoopBackOff"
	ImagePull      = "ImagePullBackOff"
	OOMKilled      = "OOMKilled"
	PendingTooLong = "PendingTooLong"
	PyJobFailed    = "PyJobFailed"
	GPUXidError    = "GPUXidError"
	GPUHot         = "GPUTemperatureHigh"
	GPUMemory      = "GPUMemoryHigh"
)

// Ref names the object a finding is about.
type Ref struct {
	APIVersion, Kind, Namespace, Name string
	UID                               string
}

// Finding is one problem the agent saw.
type Finding struct {
	Kind    string
	Object  Ref
	Message string
	// Restarts of the container, for crash loops.
	Restarts int32
	// Repairable is a crash-looping pod owned by a controller, which will
	// recreate it if deleted, or a failed PyJob whose pod failed on a node
	// since taken out of service, which a new run moves to healthy nodes.
	Repairable bool
	// rerun is the trainops.dev/rerun value that repairs it.
	rerun string
}

// Key identifies a finding across intervals, so it is announced once.
func (f Finding) Key() string {
	return f.Kind + "/" + f.Object.Kind + "/" + f.Object.Namespace + "/" + f.Object.Name + "/" + f.Object.UID
}

// Thresholds tune what counts as a problem.
type Thresholds struct {
	// Pending is how long a pod may wait to be scheduled and started.
	Pending time.Duration
	// Restarts is how many restarts make a crash loop repairable.
	Restarts int32
	// GPUTemperature in degrees Celsius.
	GPUTemperature float64
	// GPUMemory is the used share of GPU memory (0-1).
	GPUMemory float64
}

// DefaultThresholds are sensible for training clusters.
func DefaultThresholds() Thresholds {
	return Thresholds{Pending: 5 * time.Minute, Restarts: 3, GPUTemperature: 85, GPUMemory: 0.95}
}

func podRef(p *corev1.Pod) Ref {
	return Ref{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
}

// InspectPods finds crash loops, image pull failures, OOM kills and pods
// pending too long. It is pure: now is an argument.
func InspectPods(pods []corev1.Pod, now time.Time, th Thresholds) []Finding {
	var out []Finding
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		owned := metav1.GetControllerOf(p) != nil
		for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			w := cs.State.Waiting
			last := cs.LastTerminationState.Terminated
			switch {
			case w != nil && w.Reason == "CrashLoopBackOff":
				msg := fmt.Sprintf("container %s is crash-looping (%d restarts)", cs.Name, cs.RestartCount)
				if last != nil {
					msg += fmt.Sprintf(", last exit %d (%s)", last.ExitCode, last.Reason)
				}
				if last != nil && last.Reason == "OOMKilled" {
					out = append(out, Finding{Kind: OOMKilled, Object: podRef(p), Restarts: cs.RestartCount,
						Message: fmt.Sprintf("container %s was killed for using more memory than its limit (%d restarts): raise resources.memory or reduce the batch size", cs.Name, cs.RestartCount)})
				}
				repairable := owned && cs.RestartCount >= th.Restarts
				if !owned {
					msg += "; the pod has no controller, so the agent will not delete it"
				}
				out = append(out, Finding{Kind: CrashLoop, Object: podRef(p), Restarts: cs.RestartCount, Repairable: repairable, Message: msg})
			case w != nil && (w.Reason == "ImagePullBackOff" || w.Reason == "ErrImagePull"):
				out = append(out, Finding{Kind: ImagePull, Object: podRef(p),
					Message: fmt.Sprintf("container %s cannot pull image %s (%s): check the image name and the registry credentials", cs.Name, cs.Image, w.Reason)})
			case cs.State.Terminated != nil && cs.State.Terminated.Reason == "OOMKilled":
				out = append(out, Finding{Kind: OOMKilled, Object: podRef(p),
					Message: fmt.Sprintf("container %s was killed for using more memory than its limit: raise resources.memory or reduce the batch size", cs.Name)})
			}
		}
		if p.Status.Phase == corev1.PodPending && now.Sub(p.CreationTimestamp.Time) > th.Pending {
			reason := "not scheduled"
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
					reason = c.Message
				}
			}
			out = append(out, Finding{Kind: PendingTooLong, Object: podRef(p),
				Message: fmt.Sprintf("pending for %s: %s", now.Sub(p.CreationTimestamp.Time).Round(time.Second), reason)})
		}
	}
	sortFindings(out)
	return out
}

// InspectPyJobs finds failed PyJobs.
func InspectPyJobs(pjs []trainingv1alpha1.PyJob) []Finding {
	var out []Finding
	for _, pj := range pjs {
		if pj.Status.Phase != trainingv1alpha1.PyJobFailed {
			continue
		}
		out = append(out, Finding{Kind: PyJobFailed,
			Object:  Ref{APIVersion: trainingv1alpha1.GroupVersion.String(), Kind: trainingv1alpha1.PyJobKind, Namespace: pj.Namespace, Name: pj.Name, UID: string(pj.UID)},
			Message: fmt.Sprintf("training failed: %s (see kubectl logs -l pyjob-name=%s)", pj.Status.Message, pj.Name)})
	}
	sortFindings(out)
	return out
}

func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Key() < fs[j].Key() })
}

// oneLine keeps Event notes short.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
