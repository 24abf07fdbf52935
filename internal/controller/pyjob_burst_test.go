// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/gate"
)

// writeLog records, in order, the writes a reconciler makes.
type writeLog struct {
	mu     sync.Mutex
	writes []string
}

func (l *writeLog) add(w string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = append(l.writes, w)
}

func (l *writeLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.writes)
}

// loggingClient is a real client that logs its creations, applies and
// status writes.
type loggingClient struct {
	client.Client
	log *writeLog
	// prefix tells one reconciler's writes from another's.
	prefix string
}

func (c loggingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	kind := "?"
	if k, ok := obj.(interface{ GetKind() string }); ok {
		kind = k.GetKind()
	}
	c.log.add(c.prefix + kind)
	return c.Client.Apply(ctx, obj, opts...)
}

// Create logs creations, by kind.
func (c loggingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.log.add(c.prefix + obj.GetObjectKind().GroupVersionKind().Kind)
	return c.Client.Create(ctx, obj, opts...)
}

// Patch logs applies answered with metadata only, by kind.
func (c loggingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.log.add(c.prefix + obj.GetObjectKind().GroupVersionKind().Kind)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c loggingClient) Status() client.SubResourceWriter {
	return loggingStatus{SubResourceWriter: c.Client.Status(), log: c.log, prefix: c.prefix}
}

type loggingStatus struct {
	client.SubResourceWriter
	log    *writeLog
	prefix string
}

func (s loggingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.log.add(s.prefix + "status")
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// loggingRecorder is a real Event recorder that logs what it records.
type loggingRecorder struct {
	events.EventRecorder
	log    *writeLog
	prefix string
}

func (r loggingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.log.add(r.prefix + "Event")
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// TestBurstCreatesEveryJobFirst releases a burst of new PyJobs at once, as
// the gate does after a large sync, with an SREAgent released by the same
// gate, and checks that every Job is created before any Service, status or
// Event is written and before any of the SREAgent's writes; and that each
// PyJob then gets its Service, its status and one Event naming both
// children, and the SREAgent its Deployment.
//
// The reconcilers run in a manager of the test's own, which sees only the
// PyJobs and SREAgents labelled isolatedLabel. It does not watch the children: the
// built-in Job controller's status updates would (rightly) bring a PyJob's
// second pass forward, which this test is not about.
func TestBurstCreatesEveryJobFirst(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	own := isolatedManager(t, ns)
	writes := &writeLog{}
	g := &gate.Gate{}
	release := g.Hold()
	defer release()
	jobsFirst := &JobsFirst{}
	r := &PyJobReconciler{Deps: Deps{
		Client:    loggingClient{Client: own.GetClient(), log: writes},
		Recorder:  loggingRecorder{EventRecorder: own.GetEventRecorder(EventSource), log: writes},
		Config:    testCfg,
		Gate:      g,
		JobsFirst: jobsFirst,
	}}
	agents := &SREAgentReconciler{Deps: Deps{
		Client:    loggingClient{Client: own.GetClient(), log: writes, prefix: "agent "},
		Recorder:  loggingRecorder{EventRecorder: own.GetEventRecorder(EventSource), log: writes, prefix: "agent "},
		Config:    testCfg,
		Gate:      g,
		JobsFirst: jobsFirst,
	}}
	err := ctrl.NewControllerManagedBy(own).
		For(&aiopsv1alpha1.SREAgent{}, specChanged).
		WatchesRawSource(agents.wake.source()).
		WithOptions(controller.Options{MaxConcurrentReconciles: testCfg.MaxConcurrentReconciles, SkipNameValidation: ptr.To(true)}).
		Named("sreagent-burst").
		Complete(agents)
	if err != nil {
		t.Fatal(err)
	}
	err = ctrl.NewControllerManagedBy(own).
		For(&trainingv1alpha1.PyJob{}, specChanged).
		WatchesRawSource(r.wake.source()).
		// Two workers: the first passes take several rounds, time enough
		// for another kind's writes to slip in between were they not held.
		WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: ptr.To(true)}).
		Named("pyjob-burst").
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
	startIsolated(t, own)

	agent := createIsolatedAgent(ctx, t, ns, "burst-agent")
	const n = 40
	for i := range n {
		pj := &trainingv1alpha1.PyJob{}
		loadCase(t, seed("distributed-training"), pj)
		pj.Namespace, pj.Name, pj.Spec.Workers = ns, fmt.Sprintf("burst-%d", i), 2
		pj.Labels = map[string]string{isolatedLabel: "true"}
		// Suspended, so no pods are made: only the order of writes matters.
		pj.Spec.Suspend = ptr.To(true)
		if err := k8s.Create(ctx, pj); err != nil {
			t.Fatal(err)
		}
	}
	// Every PyJob is queued behind the held gate before it opens.
	eventually(t, 30*time.Second, func() error {
		var l trainingv1alpha1.PyJobList
		if err := own.GetClient().List(ctx, &l, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(l.Items) != n {
			return fmt.Errorf("%d of %d PyJobs in the cache", len(l.Items), n)
		}
		return nil
	})
	// The PyJobs waiting behind the gate hold the other kinds back.
	eventually(t, 30*time.Second, func() error {
		if !jobsFirst.inFlight() {
			return fmt.Errorf("no PyJob waiting for a first pass holds the other kinds back")
		}
		return nil
	})
	if w := writes.list(); len(w) != 0 {
		t.Fatalf("wrote while the gate was held: %v", w)
	}
	release()

	eventually(t, 60*time.Second, func() error {
		for i := range n {
			name := fmt.Sprintf("burst-%d", i)
			if pj := getPyJob(t, ns, name); pj.Status.Phase != trainingv1alpha1.PyJobSuspended {
				return fmt.Errorf("%s: phase %q", name, pj.Status.Phase)
			}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-job"}, &corev1.Service{}); err != nil {
				return err
			}
		}
		return nil
	})
	eventually(t, 30*time.Second, func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: builder.AgentChildName(agent)}, &appsv1.Deployment{})
	})
	w := writes.list()
	count := map[string]int{}
	lastJob, firstOther := -1, len(w)
	for i, kind := range w {
		count[kind]++
		if kind == "Job" {
			lastJob = i
		} else if firstOther == len(w) {
			firstOther = i
		}
	}
	if lastJob > firstOther {
		t.Errorf("a Service, status, Event or SREAgent child was written before the last Job was created: %v", w)
	}
	if count["agent Deployment"] != 1 {
		t.Errorf("%d SREAgent Deployment writes, want 1: %v", count["agent Deployment"], w)
	}
	for _, kind := range []string{"Job", "Service", "status"} {
		if count[kind] != n {
			t.Errorf("%d %s writes, want %d (one per PyJob): %v", count[kind], kind, n, w)
		}
	}
	eventually(t, 10*time.Second, func() error {
		note := eventReasons(t, ns, "burst-0")["Created"]
		if !strings.Contains(note, "Job burst-0-job") || !strings.Contains(note, "Service burst-0-job") {
			return fmt.Errorf("Created Event %q, want it to name the Job and the Service", note)
		}
		return nil
	})
}
