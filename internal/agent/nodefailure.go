// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

const (
	// PodOnFailedNode is the finding: a PyJob's pod failed on a node since
	// taken out of service.
	PodOnFailedNode = "PodOnFailedNode"
	// rerunPrefix starts the trainops.dev/rerun value the agent sets: one
	// per failed pod, so a pod reruns its PyJob once.
	rerunPrefix = "node-out-of-service-"
)

// InspectNodeFailures finds the PyJobs whose pod failed on a node trainops
// then took out of service, from the Events trainops recorded on those
// pods. A finding is repairable when the PyJob's run has failed: a new run
// (trainops.dev/rerun) starts it on healthy nodes.
func InspectNodeFailures(events []eventsv1.Event, pods []corev1.Pod, pjs []trainingv1alpha1.PyJob) []Finding {
	byName := map[string]*corev1.Pod{}
	for i := range pods {
		byName[pods[i].Name] = &pods[i]
	}
	jobs := map[string]*trainingv1alpha1.PyJob{}
	for i := range pjs {
		jobs[pjs[i].Name] = &pjs[i]
	}
	seen := map[string]bool{}
	var out []Finding
	for _, e := range events {
		if e.Reason != gpuv1alpha1.NodeOutOfServiceReason || e.ReportingController != gpuv1alpha1.EventReporter || e.Regarding.Kind != "Pod" {
			continue
		}
		p, ok := byName[e.Regarding.Name]
		if !ok || p.UID != e.Regarding.UID || p.Status.Phase != corev1.PodFailed {
			continue
		}
		pj, ok := jobs[p.Labels[builder.LabelPyJob]]
		if !ok || seen[pj.Name] {
			continue
		}
		seen[pj.Name] = true
		out = append(out, Finding{Kind: PodOnFailedNode,
			Object:  Ref{APIVersion: trainingv1alpha1.GroupVersion.String(), Kind: trainingv1alpha1.PyJobKind, Namespace: pj.Namespace, Name: pj.Name, UID: string(pj.UID)},
			Message: fmt.Sprintf("pod %s failed on node %s, which trainops has since taken out of service: %s", p.Name, p.Spec.NodeName, oneLine(e.Note)),
			// The pod's UID says which failure the rerun answers.
			Repairable: pj.Status.Phase == trainingv1alpha1.PyJobFailed && pj.Annotations[trainingv1alpha1.RerunAnnotation] != rerunPrefix+string(p.UID),
			rerun:      rerunPrefix + string(p.UID),
		})
	}
	sortFindings(out)
	return out
}

// rerunOnHealthyNodes starts a new run of each failed PyJob whose pod
// failed on a node since taken out of service, by its trainops.dev/rerun
// annotation (at most MaxRepairs per interval).
func (a *Agent) rerunOnHealthyNodes(ctx context.Context, findings []Finding, rep *Report, budget int) (int, error) {
	done := 0
	for _, f := range findings {
		if f.Kind != PodOnFailedNode || !f.Repairable {
			continue
		}
		if done >= budget {
			rep.Skipped = append(rep.Skipped, f.Object.Name)
			continue
		}
		done++
		msg := fmt.Sprintf("started a new run of PyJob %s on healthy nodes (%s=%s): %s", f.Object.Name, trainingv1alpha1.RerunAnnotation, f.rerun, f.Message)
		if a.Opts.DryRun {
			msg = "dry run: would have " + strings.TrimPrefix(msg, "started")
			a.repairs.WithLabelValues("dry-run").Inc()
		} else {
			pj := &trainingv1alpha1.PyJob{}
			pj.Namespace, pj.Name = f.Object.Namespace, f.Object.Name
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, trainingv1alpha1.RerunAnnotation, f.rerun)
			if err := a.Client.Patch(ctx, pj, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
				a.repairs.WithLabelValues("failed").Inc()
				return done, fmt.Errorf("rerun PyJob %s: %w", f.Object.Name, err)
			}
			a.repairs.WithLabelValues("rerun").Inc()
		}
		rep.Repaired = append(rep.Repaired, f.Object.Name)
		a.acted(f, "RerunPyJob", msg)
		a.Log.Info("repair", "pyjob", f.Object.Name, "dryRun", a.Opts.DryRun, "message", msg)
		if err := a.event(ctx, f.Object, corev1.EventTypeNormal, "AutoRepair", "Rerun", msg); err != nil {
			return done, err
		}
	}
	return done, nil
}
