// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
)

// TestQueuedMessageQuotesKueue: a queued PyJob's message carries what its
// Workload says: the QuotaReserved verdict while it waits, the eviction
// while it waits again, and that Kueue has not answered when it has not.
func TestQueuedMessageQuotesKueue(t *testing.T) {
	pj := &trainingv1alpha1.PyJob{Spec: trainingv1alpha1.PyJobSpec{QueueName: "team-a"}}
	workload := func(doc string) queueState {
		t.Helper()
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		return workloadQueueState(u)
	}
	tests := []struct {
		name  string
		state queueState
		want  []string
	}{
		{"no Workload", queueState{}, []string{"queue team-a", "no Workload"}},
		{"pending", workload(`
metadata: {name: job-a}
status:
  conditions:
  - {type: QuotaReserved, status: "False", reason: Pending, message: "insufficient quota for nvidia.com/gpu"}
`), []string{"queue team-a", "job-a", "Pending", "insufficient quota for nvidia.com/gpu"}},
		{"preempted", workload(`
metadata: {name: job-a}
status:
  conditions:
  - {type: QuotaReserved, status: "False", reason: Pending, message: "waiting"}
  - {type: Evicted, status: "True", reason: Preempted, message: "Preempted to accommodate a workload (UID: x)"}
`), []string{"again", "Preempted", "accommodate", "resumes when admitted"}},
		{"an eviction long over is not quoted", workload(`
metadata: {name: job-a}
status:
  conditions:
  - {type: QuotaReserved, status: "False", reason: Pending, message: "insufficient quota"}
  - {type: Evicted, status: "False", reason: Preempted, message: "old"}
`), []string{"insufficient quota"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := queuedMessage(pj, tc.state)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q does not say %q", got, w)
				}
			}
			if tc.name == "an eviction long over is not quoted" && strings.Contains(got, "old") {
				t.Errorf("%q quotes a past eviction", got)
			}
		})
	}
}

// TestWorkloadMapsToItsPyJob: a Workload queues the PyJob whose Job
// controls it, and nothing for another controller's.
func TestWorkloadMapsToItsPyJob(t *testing.T) {
	wl := func(kind, apiVersion, name string) *metav1.PartialObjectMetadata {
		o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "job-x", OwnerReferences: []metav1.OwnerReference{{
			Kind: kind, APIVersion: apiVersion, Name: name, Controller: ptr.To(true),
		}}}}
		return o
	}
	got := workloadPyJob(context.Background(), wl("Job", "batch/v1", "bert-job"))
	if len(got) != 1 || got[0].Namespace != "team-a" || got[0].Name != "bert" {
		t.Errorf("a PyJob's Job's Workload maps to %v, want team-a/bert", got)
	}
	for _, o := range []*metav1.PartialObjectMetadata{wl("Job", "batch/v1", "other"), wl("JobSet", "jobset.x-k8s.io/v1alpha2", "bert-job"), wl("Job", "batch/v1", "-job")} {
		if got := workloadPyJob(context.Background(), o); len(got) != 0 {
			t.Errorf("%+v maps to %v, want nothing", o.OwnerReferences[0], got)
		}
	}
}

// TestQueuedPlaceIsKueuesPosition: the position Kueue's visibility API
// gives a Workload (a PendingWorkloadsSummary as Kueue v0.17 writes it) is
// the status's and the message's; a Workload Kueue does not list has
// none.
func TestQueuedPlaceIsKueuesPosition(t *testing.T) {
	raw := []byte(`{"kind":"PendingWorkloadsSummary","apiVersion":"visibility.kueue.x-k8s.io/v1beta2","metadata":{},
"items":[{"metadata":{"name":"job-a","namespace":"team-a","creationTimestamp":null},"priority":0,"localQueueName":"team",
"positionInClusterQueue":7,"positionInLocalQueue":1},
{"metadata":{"name":"job-b","namespace":"team-a","creationTimestamp":null},"priority":0,"localQueueName":"team",
"positionInClusterQueue":0,"positionInLocalQueue":0}]}`)
	positions, err := decodePositions(raw)
	if err != nil {
		t.Fatal(err)
	}
	pj := &trainingv1alpha1.PyJob{Spec: trainingv1alpha1.PyJobSpec{QueueName: "team"}}
	tests := []struct {
		workload string
		want     string
		lq, cq   int32
	}{
		{"job-a", "; 1 Workload ahead of it in LocalQueue team, 7 Workloads in its ClusterQueue", 1, 7},
		{"job-b", "; next in line in LocalQueue team and its ClusterQueue", 0, 0},
		{"job-c", "", -1, -1},
	}
	for _, tc := range tests {
		s := queueState{workload: tc.workload, reason: "Pending"}
		if p, ok := positions[tc.workload]; ok {
			s.position = &p
		}
		if got := queuedPlace(pj, s.position); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.workload, got, tc.want)
		}
		q := queueStatus(s)
		if q.Workload != tc.workload || q.Reason != "Pending" ||
			ptr.Deref(q.PositionInLocalQueue, -1) != tc.lq || ptr.Deref(q.PositionInClusterQueue, -1) != tc.cq {
			t.Errorf("%s: status.queue %+v, want positions %d/%d", tc.workload, q, tc.lq, tc.cq)
		}
	}
	if q := queueStatus(queueState{}); q != nil {
		t.Errorf("status.queue %+v before Kueue made a Workload", q)
	}
	if _, err := decodePositions([]byte("<html>")); err == nil {
		t.Error("a page that is no PendingWorkloadsSummary was read")
	}
}
