// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/ctrltest"
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
	// hold, when set, keeps each Job's creation waiting until it is
	// closed, counting the waiting ones in holding.
	hold    <-chan struct{}
	holding *atomic.Int32
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
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if c.hold != nil && kind == "Job" {
		c.holding.Add(1)
		select {
		case <-c.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.log.add(c.prefix + kind)
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

// burstWorkers reconcile a burst: the first passes take several rounds,
// time enough for a second pass to slip in between were it not queued
// below them.
const burstWorkers = 2

// createBurst creates n suspended PyJobs, burst-0 to burst-(n-1), in ns,
// labelled for a manager of the test's own. Suspended, no pods are made:
// only the order of writes matters.
func createBurst(t *testing.T, ns string, n int) {
	t.Helper()
	for i := range n {
		pj := &trainingv1alpha1.PyJob{}
		testenv.LoadCase(t, testenv.Seed("distributed-training"), pj)
		pj.Namespace, pj.Name, pj.Spec.Workers = ns, fmt.Sprintf("burst-%d", i), 2
		pj.Spec.Storage = nil
		pj.Labels = map[string]string{ctrltest.IsolatedLabel: "true"}
		pj.Spec.Suspend = ptr.To(true)
		if err := k8s.Create(context.Background(), pj); err != nil {
			t.Fatal(err)
		}
	}
}

// burstReconciler is a PyJob reconciler of own whose writes go to writes;
// c may hold its Jobs' creations.
func burstReconciler(own ctrl.Manager, writes *writeLog, c loggingClient) *Reconciler {
	c.Client, c.log = own.GetClient(), writes
	return &Reconciler{Deps: children.Deps{
		Client:   c,
		Recorder: loggingRecorder{EventRecorder: own.GetEventRecorder(gpuv1alpha1.EventReporter), log: writes},
		Config:   testCfg,
	}}
}

// checkJobsFirst waits for each of the n PyJobs of a burst to have its
// status and Service, then checks that every Job was created before any
// Service, status or Event was written, but the one another worker may
// have been creating, and that each PyJob had one Job, Service and status
// written, and a Created Event naming its Job and Service.
func checkJobsFirst(t *testing.T, ns string, n int, writes *writeLog) {
	t.Helper()
	ctx := context.Background()
	testenv.Eventually(t, 60*time.Second, func() error {
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
	w := writes.list()
	count := map[string]int{}
	firstOther, jobsAfter := len(w), 0
	for i, kind := range w {
		count[kind]++
		switch {
		case kind != "Job" && firstOther == len(w):
			firstOther = i
		case kind == "Job" && firstOther < i:
			jobsAfter++
		}
	}
	// A second pass starts only once every first pass has been taken from
	// the queue; the other worker may still be in the last one, before
	// its Job's write.
	if jobsAfter > burstWorkers-1 {
		t.Errorf("%d Jobs were created after the first Service, status or Event, want at most %d (a first pass still running on another worker): %v", jobsAfter, burstWorkers-1, w)
	}
	for _, kind := range []string{"Job", "Service", "status"} {
		if count[kind] != n {
			t.Errorf("%d %s writes, want %d (one per PyJob): %v", count[kind], kind, n, w)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		note := testenv.EventReasons(t, k8s, ns, "burst-0")["Created"]
		if !strings.Contains(note, "Job burst-0-job") || !strings.Contains(note, "Service burst-0-job") {
			return fmt.Errorf("Created Event %q, want it to name the Job and the Service", note)
		}
		return nil
	})
}

// TestBurstCreatesEveryJobFirst: a burst of new PyJobs, all queued at
// once (as a reconciler's first list queues them after a restart), has
// every Job created before any Service, status or Event is written (but
// the one another worker may be creating); then each PyJob gets its
// Service, its status and one Created Event naming its Job and its
// Service. Nothing is kept in memory between the passes: the manager
// starts after the PyJobs exist.
//
// The reconciler runs in a manager of the test's own, which sees only the
// PyJobs labelled ctrltest.IsolatedLabel. It does not watch the children: the
// built-in Job controller's status updates would (rightly) bring a
// PyJob's second pass forward, which this test is not about.
func TestBurstCreatesEveryJobFirst(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	const n = 40
	createBurst(t, ns, n)
	own := suite.IsolatedManager(t, ns)
	writes := &writeLog{}
	err := ctrl.NewControllerManagedBy(own).
		For(&trainingv1alpha1.PyJob{}, children.SpecChanged).
		WithOptions(controller.Options{MaxConcurrentReconciles: burstWorkers, SkipNameValidation: ptr.To(true)}).
		Named("pyjob-burst").
		Complete(burstReconciler(own, writes, loggingClient{}))
	if err != nil {
		t.Fatal(err)
	}
	ctrltest.StartIsolated(t, own)
	checkJobsFirst(t, ns, n, writes)
}

// TestBurstWhileRunningCreatesEveryJobFirst: PyJobs created while the
// reconciler runs are queued as SetupWithManager queues them, through the
// fair handler, each one priority step below the one before. A second
// pass would keep the priority its first pass was taken with, above the
// rest of the burst, were it not queued below every first pass
// (secondPassPriority). The workers are held in their first Jobs'
// creation until the queue holds the rest of the burst, as its depth
// says; then every queued first pass still goes before any second pass.
func TestBurstWhileRunningCreatesEveryJobFirst(t *testing.T) {
	ns := testenv.NewNamespace(t, k8s)
	const n, name = 40, "pyjob-burst-running"
	own := suite.IsolatedManager(t, ns)
	writes, hold := &writeLog{}, make(chan struct{})
	holding := &atomic.Int32{}
	err := ctrl.NewControllerManagedBy(own).
		Watches(&trainingv1alpha1.PyJob{}, (&fairness{}).handler(&handler.EnqueueRequestForObject{}), children.SpecChanged).
		WithOptions(controller.Options{MaxConcurrentReconciles: burstWorkers, SkipNameValidation: ptr.To(true)}).
		Named(name).
		Complete(burstReconciler(own, writes, loggingClient{hold: hold, holding: holding}))
	if err != nil {
		t.Fatal(err)
	}
	ctrltest.StartIsolated(t, own)
	createBurst(t, ns, n)
	testenv.Eventually(t, 30*time.Second, func() error {
		if h := holding.Load(); h != burstWorkers {
			return fmt.Errorf("%d workers are creating a Job, want %d", h, burstWorkers)
		}
		if d := testenv.Metric(t, "workqueue_depth", "controller", name); d != n-burstWorkers {
			return fmt.Errorf("%v PyJobs queued, want %d", d, n-burstWorkers)
		}
		return nil
	})
	close(hold)
	checkJobsFirst(t, ns, n, writes)
}
