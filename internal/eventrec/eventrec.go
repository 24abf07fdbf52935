// SPDX-License-Identifier: Apache-2.0

// Package eventrec writes the events.k8s.io/v1 Events trainops's
// reconcilers and sync record, folding repeats into a series the way
// client-go's events broadcaster does, while remembering only the last
// Events it wrote.
//
// client-go's broadcaster keeps a deep copy of every Event it sent for
// minutes, to fold repeats: with a PyJob's Created Event that is one Event
// per PyJob held through any burst of new PyJobs (docs/benchmarks.md has
// the cost). The Writer keeps, for at most Recent Events,
// their identity and name; a repeat of an Event it no longer remembers is
// written as a new Event.
package eventrec

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/reference"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainops/trainops/internal/textsafe"
)

const (
	// Queued is how many Events wait to be written; past it new ones are
	// dropped and counted, as client-go drops them when its queue is full.
	Queued = 4096
	// Recent is how many written Events are remembered to fold repeats.
	Recent = 1024
	// Window is how long a written Event takes repeats into its series.
	Window = 6 * time.Minute
	// writers write Events concurrently: a burst of new PyJobs records
	// thousands.
	writers = 4
	// noteLimit is the API server's limit on an Event's note.
	noteLimit = 1024
)

var dropped = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "trainops_events_dropped_total",
	Help: "Events not written: the queue was full, or the API server refused them.",
})

func init() { metrics.Registry.MustRegister(dropped) }

// Writer writes Events with one client for every recorder made with For.
// Start it (it is a manager.Runnable) for anything to be written.
type Writer struct {
	client client.Client
	scheme *runtime.Scheme
	log    logr.Logger
	host   string
	queue  chan *eventsv1.Event
	now    func() time.Time

	mu     sync.Mutex
	recent map[identity]*written
}

// identity is what makes two Events repeats of one another, as client-go
// decides it: everything but the time.
type identity struct {
	regarding, related                              corev1.ObjectReference
	typ, reason, action, note, controller, instance string
}

// written is a remembered Event: its name, and its series so far.
type written struct {
	namespace, name string
	count           int32
	last            time.Time
	// written is the count the API server has.
	written int32
	// pending: a writer is writing this series; a repeat only counts,
	// and that writer writes it too.
	pending bool
}

// New makes a Writer that writes with c; s names the kinds of the objects
// Events are about.
func New(c client.Client, s *runtime.Scheme, log logr.Logger) *Writer {
	host, _ := os.Hostname()
	return &Writer{client: c, scheme: s, log: log, host: host, queue: make(chan *eventsv1.Event, Queued), now: time.Now, recent: map[identity]*written{}}
}

// For is a recorder whose Events name controller as their reporter.
func (w *Writer) For(controller string) events.EventRecorder {
	return recorder{w: w, controller: controller, instance: controller + "-" + w.host}
}

// NeedLeaderElection is false: every replica records what it does.
func (w *Writer) NeedLeaderElection() bool { return false }

// Start writes queued Events until ctx ends.
func (w *Writer) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case e := <-w.queue:
					w.write(ctx, e)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

type recorder struct {
	w                    *Writer
	controller, instance string
}

// Eventf queues an Event about regarding (and related, when not nil); it
// never waits.
func (r recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	e, err := r.w.event(regarding, related, eventtype, reason, action, textsafe.Bound(textsafe.Text(fmt.Sprintf(note, args...)), textsafe.MessageBytes), r.controller, r.instance)
	if err != nil {
		r.w.log.V(1).Info("event not recorded", "reason", reason, "error", err.Error())
		dropped.Inc()
		return
	}
	select {
	case r.w.queue <- e:
	default:
		dropped.Inc()
	}
}

// event builds the Event, as client-go's recorder does.
func (w *Writer) event(regarding, related runtime.Object, typ, reason, action, note, controller, instance string) (*eventsv1.Event, error) {
	ref, err := reference.GetReference(w.scheme, regarding)
	if err != nil {
		return nil, err
	}
	var rel *corev1.ObjectReference
	if related != nil {
		if rel, err = reference.GetReference(w.scheme, related); err != nil {
			return nil, err
		}
	}
	if len(note) > noteLimit {
		note = strings.ToValidUTF8(note[:noteLimit], "")
	}
	t := w.now()
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ref.Name, t.UnixNano()), Namespace: ns},
		EventTime:           metav1.MicroTime{Time: t},
		ReportingController: controller,
		ReportingInstance:   instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Related:             rel,
		Note:                note,
		Type:                typ,
	}, nil
}

func identityOf(e *eventsv1.Event) identity {
	id := identity{regarding: e.Regarding, typ: e.Type, reason: e.Reason, action: e.Action, note: e.Note, controller: e.ReportingController, instance: e.ReportingInstance}
	if e.Related != nil {
		id.related = *e.Related
	}
	return id
}

// write writes e: a new Event, or the next count of the series of a
// remembered one like it.
func (w *Writer) write(ctx context.Context, e *eventsv1.Event) {
	id := identityOf(e)
	now := e.EventTime.Time
	w.mu.Lock()
	if seen := w.recent[id]; seen != nil && now.Sub(seen.last) < Window {
		seen.count++
		seen.last = now
		if seen.pending {
			// Whoever is writing this series writes this count too.
			w.mu.Unlock()
			return
		}
		seen.pending = true
		done := seen.written
		w.mu.Unlock()
		err := w.flush(ctx, seen, done)
		if !apierrors.IsNotFound(err) {
			w.done(err)
			return
		}
		// Deleted since it was written: written anew.
		w.mu.Lock()
		delete(w.recent, id)
	}
	seen := &written{namespace: e.Namespace, name: e.Name, count: 1, last: now, pending: true}
	w.remember(id, seen)
	w.mu.Unlock()
	err := w.client.Create(ctx, e)
	if err == nil {
		err = w.flush(ctx, seen, 1)
	} else {
		w.mu.Lock()
		delete(w.recent, id)
		w.mu.Unlock()
	}
	w.done(err)
}

// flush writes seen's series until the count written, from done, is its
// count; the caller set seen.pending, which flush clears.
func (w *Writer) flush(ctx context.Context, seen *written, done int32) error {
	for {
		w.mu.Lock()
		seen.written = done
		if seen.count == done {
			seen.pending = false
			w.mu.Unlock()
			return nil
		}
		count, last := seen.count, seen.last
		w.mu.Unlock()
		if err := w.series(ctx, seen.namespace, seen.name, count, last); err != nil {
			w.mu.Lock()
			seen.pending = false
			w.mu.Unlock()
			return err
		}
		done = count
	}
}

// series writes the count of a remembered Event's series.
func (w *Writer) series(ctx context.Context, ns, name string, count int32, last time.Time) error {
	patch := fmt.Appendf(nil, `{"series":{"count":%d,"lastObservedTime":%q}}`, count, last.UTC().Format(metav1.RFC3339Micro))
	e := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	return w.client.Patch(ctx, e, client.RawPatch(types.MergePatchType, patch))
}

func (w *Writer) done(err error) {
	if err != nil {
		dropped.Inc()
		w.log.V(1).Info("event not written", "error", err.Error())
	}
}

// remember records seen under id, forgetting first the Events past their
// window and, when still full, one Event at random; w.mu is held.
func (w *Writer) remember(id identity, seen *written) {
	if len(w.recent) >= Recent {
		for k, v := range w.recent {
			if seen.last.Sub(v.last) >= Window {
				delete(w.recent, k)
			}
		}
	}
	if len(w.recent) >= Recent {
		for k := range w.recent {
			delete(w.recent, k)
			break
		}
	}
	w.recent[id] = seen
}

// remembered is how many Events w remembers, for tests.
func (w *Writer) remembered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.recent)
}

// Adder is the part of a controller-runtime manager Attach needs.
type Adder interface {
	GetClient() client.Client
	GetScheme() *runtime.Scheme
	GetLogger() logr.Logger
	Add(manager.Runnable) error
}

// Attach makes a Writer that writes with c (nil: mgr's client) and runs
// with mgr.
func Attach(mgr Adder, c client.Client) (*Writer, error) {
	if c == nil {
		c = mgr.GetClient()
	}
	w := New(c, mgr.GetScheme(), mgr.GetLogger().WithName("events"))
	if err := mgr.Add(w); err != nil {
		return nil, err
	}
	return w, nil
}
