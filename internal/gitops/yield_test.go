// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// acquireAsync asks for a write in the background; the channel gives its
// release once it may go.
func acquireAsync(ctx context.Context, y *Yield) <-chan func() { return acquireIn(ctx, y, "team") }

// acquireIn asks for a write into namespace in the background.
func acquireIn(ctx context.Context, y *Yield, namespace string) <-chan func() {
	out := make(chan func(), 1)
	go func() {
		if release, err := y.acquire(ctx, namespace); err == nil {
			out <- release
		}
	}()
	return out
}

// waitWaiting waits until n writes wait in y.
func waitWaiting(t *testing.T, y *Yield, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		y.mu.Lock()
		got := len(y.waiting)
		y.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes waiting, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func goes(t *testing.T, ch <-chan func(), what string) func() {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not go", what)
		return nil
	}
}

func waits(t *testing.T, ch <-chan func(), what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s went, and should wait", what)
	default:
	}
}

func counts(t *testing.T, y *Yield, inflight, waiting int) {
	t.Helper()
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.inflight != inflight || len(y.waiting) != waiting {
		t.Fatalf("%d counted in flight, %d waiting; want %d, %d", y.inflight, len(y.waiting), inflight, waiting)
	}
}

func TestWritesGoAtOnceWhileNoSyncWrites(t *testing.T) {
	y := NewYield(1)
	for range 3 {
		r := goes(t, acquireAsync(context.Background(), y), "a write with no sync")
		defer r()
	}
	counts(t, y, 0, 0)
}

func TestWritesGiveWayWhileASyncWritesAndGoInOrder(t *testing.T) {
	ctx := context.Background()
	y := NewYield(2)
	done := y.Applying()
	w1 := goes(t, acquireAsync(ctx, y), "the first write")
	w2 := goes(t, acquireAsync(ctx, y), "the second write")
	third := acquireAsync(ctx, y)
	waitWaiting(t, y, 1)
	fourth := acquireAsync(ctx, y)
	waitWaiting(t, y, 2)
	waits(t, third, "a third write while a sync writes")
	w1()
	w3 := goes(t, third, "the third write, once one ended")
	waits(t, fourth, "the fourth write, asked after the third")
	counts(t, y, 2, 1)
	// The sync ends: what waits goes at once.
	done()
	w4 := goes(t, fourth, "the fourth write, the sync done")
	for _, r := range []func(){w2, w3, w4} {
		r()
	}
	counts(t, y, 0, 0)
}

func TestATeamsWriteGoesBeforeAnotherTeamsQueue(t *testing.T) {
	ctx := context.Background()
	y := NewYield(1)
	defer y.Applying()()
	r := goes(t, acquireIn(ctx, y, "busy"), "busy's first write")
	// busy queues three more writes, then quiet asks for one.
	var busy []<-chan func()
	for i := range 3 {
		busy = append(busy, acquireIn(ctx, y, "busy"))
		waitWaiting(t, y, i+1)
	}
	quiet := acquireIn(ctx, y, "quiet")
	waitWaiting(t, y, 4)
	r()
	// busy had the last turn: quiet's one write goes next.
	r = goes(t, quiet, "quiet's write")
	for i, ch := range busy {
		waits(t, ch, fmt.Sprintf("busy's write %d while quiet's is in flight", i+2))
	}
	// Then busy's, in the order asked.
	for i, ch := range busy {
		r()
		r = goes(t, ch, fmt.Sprintf("busy's write %d", i+2))
		for _, later := range busy[i+1:] {
			waits(t, later, "a later write of busy")
		}
	}
	r()
	counts(t, y, 0, 0)
}

func TestWritesWaitUntilTheLastSyncEnds(t *testing.T) {
	ctx := context.Background()
	y := NewYield(1)
	first, second := y.Applying(), y.Applying()
	w1 := goes(t, acquireAsync(ctx, y), "the first write")
	next := acquireAsync(ctx, y)
	waitWaiting(t, y, 1)
	first()
	waits(t, next, "a write while one sync still writes")
	second()
	goes(t, next, "a write once no sync writes")()
	w1()
	counts(t, y, 0, 0)
}

func TestACancelledWaitGivesNothingAway(t *testing.T) {
	y := NewYield(1)
	done := y.Applying()
	defer done()
	w1 := goes(t, acquireAsync(context.Background(), y), "the first write")
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := y.acquire(ctx, "team")
		errc <- err
	}()
	waitWaiting(t, y, 1)
	stop := errors.New("reconcile ended")
	cancel(stop)
	if err := <-errc; !errors.Is(err, stop) {
		t.Fatalf("cancelled wait: %v, want %v", err, stop)
	}
	counts(t, y, 1, 0)
	w1()
	counts(t, y, 0, 0)
	// The slot is free again.
	goes(t, acquireAsync(context.Background(), y), "a write after the cancelled one")()
}

func TestNilYieldNeverWaits(t *testing.T) {
	var y *Yield
	defer y.Applying()()
	for range 10 {
		r, err := y.acquire(context.Background(), "team")
		if err != nil {
			t.Fatal(err)
		}
		r()
	}
}

// TestAReconcilersWriteWaitsForASyncOnTheAPIServer: a write through the
// reconcilers' client (Yielding) does not reach the API server while a
// sync of the same process applies and the reconcilers' turns are taken,
// and does once the sync is done.
func TestAReconcilersWriteWaitsForASyncOnTheAPIServer(t *testing.T) {
	// Names of this run's own: a sync of what is applied already writes
	// nothing.
	name := fmt.Sprintf("yield-%d", time.Now().UnixNano()%1_000_000)
	ns := "team-" + name
	e, _ := newEngine(t, name)
	y := NewYield(1)
	e.Yield = y
	r := newRepo(t).write("ns.yaml", namespaceYAML(ns))
	for i := range 300 {
		r.write(fmt.Sprintf("jobs/%03d.yaml", i), pyjob(ns, fmt.Sprintf("job-%03d", i), "img:1", 1))
	}
	r.rev++
	synced := make(chan error, 1)
	go func() {
		_, err := r.resync(e)
		synced <- err
	}()
	applying := func() bool {
		y.mu.Lock()
		defer y.mu.Unlock()
		return y.applying > 0
	}
	deadline := time.Now().Add(30 * time.Second)
	for !applying() {
		if time.Now().After(deadline) {
			t.Fatal("the sync never said it writes")
		}
		time.Sleep(time.Millisecond)
	}
	// Take the reconcilers' one turn, as a write in flight would.
	held, err := y.acquire(context.Background(), "team")
	if err != nil {
		t.Fatal(err)
	}
	defer held()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reconciler-write"}}
	created := make(chan error, 1)
	go func() { created <- Yielding(e.Client, y).Create(context.Background(), cm.DeepCopy()) }()
	key := client.ObjectKeyFromObject(cm)
	seen := 0
	for done := false; !done; {
		select {
		case err := <-synced:
			if err != nil {
				t.Fatalf("sync: %v", err)
			}
			done = true
		default:
			err := e.Client.Get(context.Background(), key, &corev1.ConfigMap{})
			// Read after the look-up: the write is let through only once
			// no sync writes, so if the sync still writes now, the write
			// had not been sent when the look-up was answered.
			still := applying()
			if err == nil && still {
				t.Fatal("the reconcilers' write reached the API server while the sync applied")
			}
			if still {
				seen++
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if seen == 0 {
		t.Fatal("no look-up was made while the sync applied: nothing shown")
	}
	select {
	case err := <-created:
		if err != nil {
			t.Fatalf("the reconcilers' write once the sync was done: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reconcilers' write did not go once the sync was done")
	}
}
