// SPDX-License-Identifier: Apache-2.0

package kueuetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/testenv"
)

// TestAQueuedPyJobKnowsItsPlaceInLine: two PyJobs that do not fit their
// ClusterQueue's quota wait in line; each one's status gives its Workload,
// Kueue's reason and the position Kueue's own visibility API (served
// through the API server's aggregation layer) gives it, and the message
// says it. When the first is admitted, an Event says so, and the second
// moves up.
func TestAQueuedPyJobKnowsItsPlaceInLine(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	cq := queues(t, ns, 8)
	first := newPyJob(ns, "first", longImage, 3, 4)
	createPyJob(t, first)
	waitPhase(t, ns, first.Name, trainingv1alpha1.PyJobQueued, 60*time.Second, "insufficient quota")
	// Kueue orders a queue's Workloads by priority, then by when they were
	// made, to the second: the second comes a second later.
	created := workload(t, first).GetCreationTimestamp()
	testenv.Eventually(t, 5*time.Second, func() error {
		if time.Since(created.Time) <= time.Second {
			return fmt.Errorf("Workload %s made less than a second ago", workload(t, first).GetName())
		}
		return nil
	})
	second := newPyJob(ns, "second", longImage, 3, 4)
	createPyJob(t, second)

	got := waitPlace(t, second, 1, 1)
	if got.Status.Queue.Workload != workload(t, second).GetName() || got.Status.Queue.Reason != "Pending" {
		t.Errorf("status.queue %+v, want Workload %s, reason Pending", got.Status.Queue, workload(t, second).GetName())
	}
	waitPhase(t, ns, second.Name, trainingv1alpha1.PyJobQueued, 10*time.Second, "1 Workload ahead of it in LocalQueue team, 1 Workload in its ClusterQueue")
	if row := tableRow(t, second); row["Phase"] != "Queued" || row["Queue"] != "team" || row["Position"] != "1" {
		t.Errorf("kubectl get pyjobs shows %v, want Queued in team at position 1", row)
	}
	waitPlace(t, first, 0, 0)
	waitPhase(t, ns, first.Name, trainingv1alpha1.PyJobQueued, 10*time.Second, "next in line in LocalQueue team")
	if n := len(workerPods(t, ns, first.Name)) + len(workerPods(t, ns, second.Name)); n != 0 {
		t.Fatalf("%d pods of PyJobs waiting in line", n)
	}
	// The positions are Kueue's: its visibility API says the same.
	want := map[string][2]int32{}
	for _, pj := range []*trainingv1alpha1.PyJob{first, second} {
		p := getPyJob(t, ns, pj.Name).Status.Queue
		want[p.Workload] = [2]int32{*p.PositionInLocalQueue, *p.PositionInClusterQueue}
	}
	if kueue := pendingWorkloads(t, ns, "team"); fmt.Sprint(kueue) != fmt.Sprint(want) {
		t.Errorf("Kueue's visibility API says %v, the PyJobs' status %v", kueue, want)
	}

	setGPUQuota(t, cq, 12)
	running := waitPhase(t, ns, first.Name, trainingv1alpha1.PyJobRunning, 60*time.Second, "3/3 workers running")
	if running.Status.Queue != nil {
		t.Errorf("status.queue %+v of a running PyJob", running.Status.Queue)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if note := testenv.EventReasons(t, k8s, ns, first.Name)["Admitted"]; !strings.Contains(note, "queue team admitted the Job") {
			return fmt.Errorf("no Admitted Event (%q)", note)
		}
		return nil
	})
	// Nothing of the second PyJob changed in Kueue: trainops reads the
	// line again by itself.
	waitPlace(t, second, 0, 0)
}

// tableRow is pj's row as `kubectl get pyjobs` shows it (the API server's
// Table of the CRD's printer columns), by column name.
func tableRow(t *testing.T, pj *trainingv1alpha1.PyJob) map[string]string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.Discovery().RESTClient().Get().
		AbsPath("/apis/training.trainops.dev/v1alpha1/namespaces", pj.Namespace, "pyjobs", pj.Name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows for one PyJob", len(table.Rows))
	}
	row := map[string]string{}
	for i, c := range table.ColumnDefinitions {
		if i < len(table.Rows[0].Cells) {
			row[c.Name] = fmt.Sprint(table.Rows[0].Cells[i])
		}
	}
	return row
}

// waitPlace waits until pj's status gives its position in its LocalQueue
// and ClusterQueue as lq and cq.
func waitPlace(t *testing.T, pj *trainingv1alpha1.PyJob, lq, cq int32) *trainingv1alpha1.PyJob {
	t.Helper()
	var got *trainingv1alpha1.PyJob
	testenv.Eventually(t, 60*time.Second, func() error {
		got = getPyJob(t, pj.Namespace, pj.Name)
		q := got.Status.Queue
		if q == nil || !ptrEqual(q.PositionInLocalQueue, lq) || !ptrEqual(q.PositionInClusterQueue, cq) {
			return fmt.Errorf("%s: phase %s, status.queue %s, want positions %d/%d", pj.Name, got.Status.Phase, queueText(q), lq, cq)
		}
		return nil
	})
	return got
}

func ptrEqual(p *int32, v int32) bool { return p != nil && *p == v }

// queueText shows a status.queue in a failure.
func queueText(q *trainingv1alpha1.PyJobQueueStatus) string {
	if q == nil {
		return "unset"
	}
	return fmt.Sprintf("{workload %s, reason %s, positions %d/%d}", q.Workload, q.Reason,
		ptr.Deref(q.PositionInLocalQueue, -1), ptr.Deref(q.PositionInClusterQueue, -1))
}

// pendingWorkloads asks Kueue's visibility API, through the API server,
// for the positions of a LocalQueue's pending Workloads, by name.
func pendingWorkloads(t *testing.T, ns, lq string) map[string][2]int32 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.Discovery().RESTClient().Get().
		AbsPath("/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces", ns, "localqueues", lq, "pendingworkloads").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			PositionInLocalQueue   int32 `json:"positionInLocalQueue"`
			PositionInClusterQueue int32 `json:"positionInClusterQueue"`
		} `json:"items"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	out := map[string][2]int32{}
	for _, it := range s.Items {
		out[it.Metadata.Name] = [2]int32{it.PositionInLocalQueue, it.PositionInClusterQueue}
	}
	return out
}

// setGPUQuota sets the GPU quota of the ClusterQueue queues made.
func setGPUQuota(t *testing.T, cq string, gpus int64) {
	t.Helper()
	updateClusterQueue(t, cq, func(spec map[string]any) { testenv.SetGPUQuota(spec, gpus) })
}

// updateClusterQueue changes a ClusterQueue's spec with change.
func updateClusterQueue(t *testing.T, cq string, change func(spec map[string]any)) {
	t.Helper()
	u := testenv.KueueObject("ClusterQueue", "", cq, nil)
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(u), u); err != nil {
		t.Fatal(err)
	}
	change(u.Object["spec"].(map[string]any))
	if err := k8s.Update(context.Background(), u); err != nil {
		t.Fatal(err)
	}
}
