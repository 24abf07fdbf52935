// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/gpuhealth"
)

// Options configure the agent.
type Options struct {
	Namespace  string
	Interval   time.Duration
	AutoRepair bool
	// DryRun reports the repairs it would make without making them.
	DryRun bool
	// MaxRepairs bounds the pods deleted in one interval.
	MaxRepairs int
	GPU        bool
	// DCGMURL is the exporter's metrics address.
	DCGMURL    string
	Thresholds Thresholds
	// Listen serves /healthz and /metrics.
	Listen string
	// Instance names this agent in Events (the pod name).
	Instance string
	// SREAgent names the SREAgent (in Namespace) whose status gets the
	// findings and actions; none when empty.
	SREAgent string
}

// Agent watches one namespace.
type Agent struct {
	Client client.Client
	Opts   Options
	Log    logr.Logger
	HTTP   *http.Client
	Now    func() time.Time

	// announced holds when each current finding was first seen.
	announced map[string]time.Time
	// actions are the latest repairs, newest first; written is the status
	// last written, so an unchanged one is not written again.
	actions []aiopsv1alpha1.SREAgentAction
	written string
	// resumed: the earlier agent's actions and finding times (earlier,
	// by kind and object) are read.
	resumed  bool
	earlier  map[string]time.Time
	registry *prometheus.Registry
	current  *prometheus.GaugeVec
	total    *prometheus.CounterVec
	repairs  *prometheus.CounterVec
	lastRun  prometheus.Gauge
}

// New makes an agent with its own metrics registry.
func New(c client.Client, opts Options, log logr.Logger) *Agent {
	a := &Agent{Client: c, Opts: opts, Log: log, HTTP: &http.Client{Timeout: 10 * time.Second}, Now: time.Now, announced: map[string]time.Time{}}
	a.registry = prometheus.NewRegistry()
	a.current = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "trainops_agent_findings", Help: "Problems seen in the last inspection, by kind."}, []string{"kind"})
	a.total = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trainops_agent_findings_total", Help: "Problems announced, by kind (each once)."}, []string{"kind"})
	a.repairs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trainops_agent_repairs_total", Help: "Crash-looping pods deleted for their controller to recreate, by result."}, []string{"result"})
	a.lastRun = prometheus.NewGauge(prometheus.GaugeOpts{Name: "trainops_agent_last_inspection_timestamp_seconds", Help: "When the agent last inspected its namespace."})
	a.registry.MustRegister(a.current, a.total, a.repairs, a.lastRun, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return a
}

// Registry holds the agent's metrics.
func (a *Agent) Registry() *prometheus.Registry { return a.registry }

// Report is what one inspection found and did.
type Report struct {
	Findings []Finding
	New      []Finding
	Repaired []string
	Skipped  []string
}

// Run inspects every interval and serves /healthz and /metrics until ctx
// ends (SIGTERM in a pod).
func (a *Agent) Run(ctx context.Context) error {
	if a.Opts.GPU && a.Opts.DCGMURL == "" {
		a.Log.Info("GPU checks are off: no DCGM exporter address (no active ClusterPolicy runs one)")
	}
	var srv *http.Server
	if a.Opts.Listen != "" && a.Opts.Listen != "0" {
		l, err := net.Listen("tcp", a.Opts.Listen)
		if err != nil {
			return fmt.Errorf("listen %s: %w", a.Opts.Listen, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		mux.Handle("/metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{}))
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	a.Log.Info("agent started", "namespace", a.Opts.Namespace, "interval", a.Opts.Interval.String(), "autoRepair", a.Opts.AutoRepair, "dryRun", a.Opts.DryRun, "gpu", a.Opts.GPU)
	t := time.NewTicker(a.Opts.Interval)
	defer t.Stop()
	for {
		if _, err := a.RunOnce(ctx); err != nil && ctx.Err() == nil {
			a.Log.Error(err, "inspection failed")
		}
		select {
		case <-ctx.Done():
			a.Log.Info("agent stopped")
			return nil
		case <-t.C:
		}
	}
}

// RunOnce inspects the namespace once, announces new findings and repairs
// what it may.
func (a *Agent) RunOnce(ctx context.Context) (*Report, error) {
	ns := client.InNamespace(a.Opts.Namespace)
	var pods corev1.PodList
	if err := a.Client.List(ctx, &pods, ns); err != nil {
		return nil, fmt.Errorf("list pods in %s: %w", a.Opts.Namespace, err)
	}
	var pjs trainingv1alpha1.PyJobList
	if err := a.Client.List(ctx, &pjs, ns); err != nil {
		return nil, fmt.Errorf("list PyJobs in %s: %w", a.Opts.Namespace, err)
	}
	var events eventsv1.EventList
	if err := a.Client.List(ctx, &events, ns); err != nil {
		return nil, fmt.Errorf("list Events in %s: %w", a.Opts.Namespace, err)
	}
	now := a.Now()
	findings := append(InspectPods(pods.Items, now, a.Opts.Thresholds), InspectPyJobs(pjs.Items)...)
	findings = append(findings, InspectNodeFailures(events.Items, pods.Items, pjs.Items)...)
	var errs []error
	if a.Opts.GPU && a.Opts.DCGMURL != "" {
		gpus, err := gpuhealth.ScrapeDCGM(ctx, a.HTTP, a.Opts.DCGMURL)
		if err != nil {
			errs = append(errs, err)
		} else {
			findings = append(findings, InspectGPUs(gpus, a.Opts.Thresholds)...)
		}
	}
	rep := &Report{Findings: findings}
	a.current.Reset()
	seen := map[string]bool{}
	for _, f := range findings {
		a.current.WithLabelValues(f.Kind).Inc()
		seen[f.Key()] = true
		if _, ok := a.announced[f.Key()]; ok {
			continue
		}
		a.announced[f.Key()] = now
		rep.New = append(rep.New, f)
		a.total.WithLabelValues(f.Kind).Inc()
		a.Log.Info("finding", "kind", f.Kind, "object", f.Object.Kind+"/"+f.Object.Name, "namespace", f.Object.Namespace, "message", f.Message)
		if err := a.event(ctx, f.Object, corev1.EventTypeWarning, f.Kind, "Inspect", f.Message); err != nil {
			errs = append(errs, err)
		}
	}
	// A problem that went away is announced again if it comes back.
	for k := range a.announced {
		if !seen[k] {
			delete(a.announced, k)
		}
	}
	if a.Opts.AutoRepair {
		errs = append(errs, a.repair(ctx, findings, rep))
	}
	errs = append(errs, a.writeStatus(ctx, findings))
	a.lastRun.Set(float64(now.Unix()))
	return rep, errors.Join(errs...)
}

// repair deletes crash-looping pods that a controller will recreate, and
// starts a new run of PyJobs that failed on a node since taken out of
// service, at most MaxRepairs per interval.
func (a *Agent) repair(ctx context.Context, findings []Finding, rep *Report) error {
	done, err := a.rerunOnHealthyNodes(ctx, findings, rep, a.Opts.MaxRepairs)
	errs := []error{err}
	for _, f := range findings {
		if f.Kind != CrashLoop {
			continue
		}
		if !f.Repairable {
			continue
		}
		if done >= a.Opts.MaxRepairs {
			rep.Skipped = append(rep.Skipped, f.Object.Name)
			continue
		}
		done++
		msg := fmt.Sprintf("deleted pod %s after %d restarts so its controller recreates it", f.Object.Name, f.Restarts)
		if a.Opts.DryRun {
			msg = fmt.Sprintf("dry run: would delete pod %s after %d restarts so its controller recreates it", f.Object.Name, f.Restarts)
			a.repairs.WithLabelValues("dry-run").Inc()
		} else {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.Object.Namespace, Name: f.Object.Name}}
			// Preconditions: only the pod that was inspected, not a
			// replacement with the same name.
			err := a.Client.Delete(ctx, pod, client.Preconditions{UID: ptrUID(f.Object.UID)})
			if err != nil {
				a.repairs.WithLabelValues("failed").Inc()
				errs = append(errs, fmt.Errorf("delete pod %s: %w", f.Object.Name, err))
				continue
			}
			a.repairs.WithLabelValues("deleted").Inc()
		}
		rep.Repaired = append(rep.Repaired, f.Object.Name)
		a.acted(f, "DeletePod", msg)
		a.Log.Info("repair", "pod", f.Object.Name, "dryRun", a.Opts.DryRun, "message", msg)
		if err := a.event(ctx, f.Object, corev1.EventTypeNormal, "AutoRepair", "Delete", msg); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func ptrUID(s string) *types.UID { u := types.UID(s); return &u }

// event records an events.k8s.io/v1 Event about ref in the agent's
// namespace.
func (a *Agent) event(ctx context.Context, ref Ref, typ, reason, action, note string) error {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	now := a.Now()
	name := ref.Name
	if len(name) > 200 {
		name = name[:200]
	}
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%s", name, hex.EncodeToString(suffix)), Namespace: a.Opts.Namespace},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: "trainops.dev/agent",
		ReportingInstance:   a.Opts.Instance,
		Action:              action,
		Reason:              reason,
		Type:                typ,
		Note:                truncate(oneLine(note), 1000),
		Regarding:           corev1.ObjectReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: ref.Namespace, Name: ref.Name, UID: types.UID(ref.UID)},
	}
	if ref.Kind == "Node" {
		// An Event must live in the namespace of what it regards, and the
		// agent may write only in its own: a GPU finding regards the agent's
		// pod and names the node as related.
		ev.Related = &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: ref.Name}
		ev.Regarding = corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: a.Opts.Namespace, Name: a.Opts.Instance}
	}
	if err := a.Client.Create(ctx, ev); err != nil {
		return fmt.Errorf("record event %s on %s %s: %w", reason, ref.Kind, ref.Name, err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
