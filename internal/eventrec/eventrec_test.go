// SPDX-License-Identifier: Apache-2.0

package eventrec

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/scheme"
	"github.com/trainops/trainops/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.Options{}, &env)) }

// setup makes a namespace holding a ConfigMap for Events to be about, and
// a Writer with a client of the real API server.
func setup(t *testing.T) (client.Client, *Writer, *corev1.ConfigMap) {
	t.Helper()
	s := scheme.New()
	c, err := client.New(env.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "events-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "subject"}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	return c, New(c, s, logr.Discard()), cm
}

// start runs w until the test ends.
func start(t *testing.T, w *Writer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func listEvents(t *testing.T, c client.Client, ns string) []eventsv1.Event {
	t.Helper()
	var l eventsv1.EventList
	if err := c.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// Five alike Events are one Event with a series of five; one with another
// note is an Event of its own.
func TestRepeatsFoldIntoOneSeries(t *testing.T) {
	c, w, cm := setup(t)
	start(t, w)
	rec := w.For("trainops-test")
	for i := range 5 {
		rec.Eventf(cm, nil, corev1.EventTypeWarning, "DriftCorrected", "Apply", "put back %s", "data")
		if i == 2 {
			time.Sleep(50 * time.Millisecond) // some repeats after the first is written
		}
	}
	rec.Eventf(cm, nil, corev1.EventTypeNormal, "Created", "Create", "created %s", "Job a")
	testenv.Eventually(t, 20*time.Second, func() error {
		got := map[string]int32{}
		for _, e := range listEvents(t, c, cm.Namespace) {
			if e.Regarding.Kind != "ConfigMap" || e.Regarding.Name != cm.Name || e.Regarding.UID != cm.UID {
				return fmt.Errorf("event about %v, want the ConfigMap", e.Regarding)
			}
			if e.ReportingController != "trainops-test" || e.ReportingInstance == "" || e.Action == "" {
				return fmt.Errorf("event %s reports %q/%q, action %q", e.Name, e.ReportingController, e.ReportingInstance, e.Action)
			}
			n := int32(1)
			if e.Series != nil {
				n = e.Series.Count
			}
			got[e.Note] += n
			if e.Note == "put back data" && e.Series == nil {
				return fmt.Errorf("the repeated Event has no series yet")
			}
		}
		if len(got) != 2 || got["put back data"] != 5 || got["created Job a"] != 1 {
			return fmt.Errorf("events by note and count %v, want put back data: 5 in one Event, created Job a: 1", got)
		}
		if n := len(listEvents(t, c, cm.Namespace)); n != 2 {
			return fmt.Errorf("%d Events, want 2", n)
		}
		return nil
	})
}

// A repeat of an Event deleted since is written as a new Event.
func TestARepeatOfADeletedEventIsWrittenAnew(t *testing.T) {
	c, w, cm := setup(t)
	start(t, w)
	rec := w.For("trainops-test")
	rec.Eventf(cm, nil, corev1.EventTypeNormal, "Created", "Create", "created Job a")
	var first eventsv1.Event
	testenv.Eventually(t, 20*time.Second, func() error {
		l := listEvents(t, c, cm.Namespace)
		if len(l) != 1 {
			return fmt.Errorf("%d Events, want 1", len(l))
		}
		first = l[0]
		return nil
	})
	if err := c.Delete(context.Background(), &first); err != nil {
		t.Fatal(err)
	}
	rec.Eventf(cm, nil, corev1.EventTypeNormal, "Created", "Create", "created Job a")
	testenv.Eventually(t, 20*time.Second, func() error {
		l := listEvents(t, c, cm.Namespace)
		if len(l) != 1 || l[0].Name == first.Name {
			return fmt.Errorf("%d Events, want one new one", len(l))
		}
		return nil
	})
}

// Past Queued waiting Events, Eventf drops the new ones and counts them,
// without waiting; nothing is written while the Writer is not started.
func TestAFullQueueDropsWithoutWaiting(t *testing.T) {
	c, w, cm := setup(t)
	rec := w.For("trainops-test")
	before := testutil.ToFloat64(dropped)
	done := make(chan struct{})
	go func() {
		for i := range Queued + 10 {
			rec.Eventf(cm, nil, corev1.EventTypeNormal, "Created", "Create", "created Job %d", i)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Eventf waited on a full queue")
	}
	if got := testutil.ToFloat64(dropped) - before; got != 10 {
		t.Errorf("%v Events counted dropped, want 10", got)
	}
	if len(w.queue) != Queued {
		t.Errorf("%d Events queued, want %d", len(w.queue), Queued)
	}
	if l := listEvents(t, c, cm.Namespace); len(l) != 0 {
		t.Errorf("%d Events written by a Writer never started", len(l))
	}
}

// The Writer remembers at most Recent Events, forgetting first those past
// their Window.
func TestRememberedEventsAreBounded(t *testing.T) {
	w := New(nil, scheme.New(), logr.Discard())
	t0 := time.Now()
	id := func(i int) identity { return identity{note: fmt.Sprint(i)} }
	for i := range Recent + 100 {
		w.remember(id(i), &written{last: t0})
	}
	if n := w.remembered(); n != Recent {
		t.Fatalf("%d Events remembered, want %d", n, Recent)
	}
	w.remember(id(-1), &written{last: t0.Add(Window)})
	if n := w.remembered(); n != 1 {
		t.Errorf("%d Events remembered after all but one passed their window, want 1", n)
	}
}
