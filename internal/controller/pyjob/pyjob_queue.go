// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// Kueue's Workload, read to say why a queued PyJob waits. trainops reads
// it as unstructured: a cluster without Kueue has no such kind, and its
// PyJobs still work.
var workloadListGVK = schema.GroupVersionKind{Group: "kueue.x-k8s.io", Version: "v1beta2", Kind: "WorkloadList"}

const (
	// kueueJobUIDLabel is the label Kueue puts on the Workload of a Job:
	// the Job's UID.
	kueueJobUIDLabel = "kueue.x-k8s.io/job-uid"
	// ReasonQueued is the reason of a PyJob waiting for its queue to admit
	// it.
	ReasonQueued = "Queued"
	// ReasonAdmitted is the reason of the Event of a queued PyJob its
	// queue admitted.
	ReasonAdmitted = "Admitted"
	// queuedPoll re-reads a queued PyJob's Workload where Workloads are
	// not watched: Kueue changes the Workload, not the Job, while it
	// waits.
	queuedPoll = 30 * time.Second
	// verdictPoll re-reads it sooner while Kueue has said nothing yet.
	verdictPoll = 2 * time.Second
)

// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads,verbs=get;list;watch

// workloadWatch is the metadata of Kueue's Workloads to watch; nil when
// the cluster does not serve them (no Kueue: a timer re-reads instead,
// should Kueue come later).
func workloadWatch(mapper meta.RESTMapper) client.Object {
	gvk := workloadListGVK.GroupVersion().WithKind("Workload")
	if _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		return nil
	}
	wl := &metav1.PartialObjectMetadata{}
	wl.SetGroupVersionKind(gvk)
	return wl
}

// workloadPyJob maps a Workload to the PyJob whose Job it admits: its
// controller is the Job, and a PyJob's Job is builder.JobName of it.
func workloadPyJob(_ context.Context, o client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != "batch/v1" {
		return nil
	}
	name, ok := strings.CutSuffix(ref.Name, builder.JobName(&trainingv1alpha1.PyJob{}))
	if !ok || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// queueState is what Kueue says of a queued PyJob's Job.
type queueState struct {
	// workload is the Workload's name; empty when Kueue has not made one
	// (yet, or at all: Kueue is not installed).
	workload string
	// clusterQueue is where the Workload waits, when Kueue has said.
	clusterQueue string
	// reason and message are Kueue's: the Evicted condition's while the
	// Workload was evicted (preempted, say) and waits again, else the
	// QuotaReserved condition's.
	reason, message string
	// position is where the Workload waits; nil when Kueue's visibility
	// API did not say (not served, or the Workload is not pending).
	position *Position
	// inLine is set when Kueue's visibility API answered: the line can
	// move without a change to this Workload.
	inLine bool
}

// queued reports whether job waits for its queue: it is suspended, and
// only because pj names a queue.
func queued(pj *trainingv1alpha1.PyJob, job *batchv1.Job) bool {
	return job != nil && pj.Spec.QueueName != "" && !boolValue(pj.Spec.Suspend) && boolValue(job.Spec.Suspend)
}

func boolValue(b *bool) bool { return b != nil && *b }

// readQueueState reads the Workload Kueue made for job. An error reading
// it (no Kueue, no permission) leaves the state empty: the status then
// says only that the Job waits for its queue.
func (r *Reconciler) readQueueState(ctx context.Context, pj *trainingv1alpha1.PyJob, job *batchv1.Job) queueState {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(workloadListGVK)
	if err := r.Live().List(ctx, list, client.InNamespace(job.Namespace), client.MatchingLabels{kueueJobUIDLabel: string(job.UID)}); err != nil || len(list.Items) == 0 {
		return queueState{}
	}
	s := workloadQueueState(&list.Items[0])
	if r.Positions != nil {
		if positions, err := r.Positions(ctx, pj.Namespace, pj.Spec.QueueName); err == nil {
			s.inLine = true
			if p, ok := positions[s.workload]; ok {
				s.position = &p
			}
		}
	}
	return s
}

// workloadQueueState reads a Workload's queue state. It is pure.
func workloadQueueState(wl *unstructured.Unstructured) queueState {
	s := queueState{workload: wl.GetName()}
	s.clusterQueue, _, _ = unstructured.NestedString(wl.Object, "status", "admission", "clusterQueue")
	raw, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
	var conds []metav1.Condition
	for _, c := range raw {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		var cond metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cond); err == nil {
			conds = append(conds, cond)
		}
	}
	if c := meta.FindStatusCondition(conds, "Evicted"); c != nil && c.Status == metav1.ConditionTrue {
		s.reason, s.message = c.Reason, c.Message
		return s
	}
	if c := meta.FindStatusCondition(conds, "QuotaReserved"); c != nil {
		s.reason, s.message = c.Reason, c.Message
	}
	return s
}

// evicted reports whether Kueue's reason for a waiting Workload is an
// eviction: it was admitted, and its workers were stopped.
func evicted(reason string) bool {
	return reason == "Preempted" || reason == "InactiveWorkload" || reason == "PodsReadyTimeout"
}

// queuedMessage is the status message of a PyJob waiting for its queue.
func queuedMessage(pj *trainingv1alpha1.PyJob, s queueState) string {
	return queuedReason(pj, s) + queuedPlace(pj, s.position)
}

// queuedPlace says where in line a queued PyJob waits; empty when unknown.
func queuedPlace(pj *trainingv1alpha1.PyJob, p *Position) string {
	if p == nil {
		return ""
	}
	ahead := func(n int32) string {
		if n == 1 {
			return "1 Workload"
		}
		return fmt.Sprintf("%d Workloads", n)
	}
	if p.LocalQueue == 0 && p.ClusterQueue == 0 {
		return fmt.Sprintf("; next in line in LocalQueue %s and its ClusterQueue", pj.Spec.QueueName)
	}
	return fmt.Sprintf("; %s ahead of it in LocalQueue %s, %s in its ClusterQueue", ahead(p.LocalQueue), pj.Spec.QueueName, ahead(p.ClusterQueue))
}

// queueStatus is status.queue of a queued PyJob. It is pure.
func queueStatus(s queueState) *trainingv1alpha1.PyJobQueueStatus {
	if s.workload == "" {
		return nil
	}
	q := &trainingv1alpha1.PyJobQueueStatus{Workload: s.workload, Reason: s.reason}
	if s.position != nil {
		q.PositionInLocalQueue = ptr.To(s.position.LocalQueue)
		q.PositionInClusterQueue = ptr.To(s.position.ClusterQueue)
	}
	return q
}

// queuedReason says why a PyJob waits for its queue, in Kueue's words.
func queuedReason(pj *trainingv1alpha1.PyJob, s queueState) string {
	msg := fmt.Sprintf("waiting for queue %s to admit the Job", pj.Spec.QueueName)
	switch {
	case s.workload == "":
		return msg + " (Kueue has no Workload for it yet)"
	case evicted(s.reason):
		return fmt.Sprintf("%s again: Kueue evicted Workload %s (%s: %s); its workers were stopped and the run resumes when admitted", msg, s.workload, s.reason, s.message)
	case s.message != "":
		return fmt.Sprintf("%s: Workload %s %s: %s", msg, s.workload, s.reason, s.message)
	}
	return fmt.Sprintf("%s: Workload %s", msg, s.workload)
}
