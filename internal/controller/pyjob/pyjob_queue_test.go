// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
