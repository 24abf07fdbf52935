// SPDX-License-Identifier: Apache-2.0

package remediationtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/eventrec"
	"github.com/trainops/trainops/internal/testenv"
)

const gpuNodes = 3

var (
	env *testenv.Env
	k8s client.Client
	// exporters serve each GPU node's DCGM readings.
	exporters = map[string]*exporter{}
	// trap counts the connections trainops opened to any address that is
	// not an exporter pod of the ClusterPolicy.
	trap atomic.Int64
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Full: true, GPUNodes: gpuNodes, CPUNodes: 1}, &env, start))
}

// exporter is one node's fake DCGM exporter: it serves body, or hangs.
type exporter struct {
	srv  *httptest.Server
	mu   sync.Mutex
	body []byte
	hang bool
	hits atomic.Int64
}

func (e *exporter) serve(body []byte, hang bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.body, e.hang = body, hang
}

func (e *exporter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.hits.Add(1)
	e.mu.Lock()
	body, hang := e.body, e.hang
	e.mu.Unlock()
	if hang {
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write(body)
}

// sample is a file of testdata/dcgm, its readings moved to node.
func sample(name string) []byte {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "dcgm", name))
	if err != nil {
		panic(err)
	}
	return b
}

// exporterNodes maps the pod IP of each exporter pod of the policy to its
// node, refreshed by watchExporters, so a dial asks the API server
// nothing (a scrape's time is bounded).
var exporterNodes atomic.Pointer[map[string]string]

// watchExporters refreshes exporterNodes until ctx ends.
func watchExporters(ctx context.Context) {
	for ctx.Err() == nil {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace("gpu-operator"), client.MatchingLabels{"app": builder.DCGMExporterDaemonSet}); err == nil {
			m := map[string]string{}
			for _, p := range pods.Items {
				if p.Status.PodIP != "" && len(p.OwnerReferences) > 0 && p.OwnerReferences[0].Kind == "DaemonSet" {
					m[p.Status.PodIP] = p.Spec.NodeName
				}
			}
			exporterNodes.Store(&m)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// dial stands for the network between trainops and the exporter pods: an
// address that is the pod IP of an exporter pod of the policy reaches the
// test's exporter of that pod's node; any other reaches the trap.
func dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if m := exporterNodes.Load(); m != nil {
		if e, ok := exporters[(*m)[host]]; ok {
			return (&net.Dialer{}).DialContext(ctx, network, e.srv.Listener.Addr().String())
		}
	}
	trap.Add(1)
	return nil, fmt.Errorf("test network: no exporter at %s", addr)
}

// start runs the GPU stack's reconcilers and remediation, reading the
// simulated nodes' exporters through dial.
func start(ctx context.Context, e *testenv.Env) error {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(false)))
	scheme := controller.NewScheme()
	var err error
	if k8s, err = client.New(e.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	for _, n := range e.Nodes {
		if strings.HasPrefix(n, "gpu-") {
			x := &exporter{body: sample("healthy.prom")}
			x.srv = httptest.NewServer(x)
			exporters[n] = x
		}
	}
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Cache: controller.CacheOptions()})
	if err != nil {
		return err
	}
	ev, err := eventrec.Attach(mgr)
	if err != nil {
		return err
	}
	cfg := config.Controllers{MaxConcurrentReconciles: 2, RetryDelay: time.Second}
	deps := controller.Deps{Client: mgr.GetClient(), Recorder: ev.For(controller.EventSource), APIReader: mgr.GetAPIReader(), Config: cfg}
	if err := (&controller.GPUNodeReconciler{Client: mgr.GetClient(), Config: cfg}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controller.ClusterPolicyReconciler{Deps: deps}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controller.RemediationReconciler{Deps: deps, Dial: dial, ReadSimulatedNodes: true}).SetupWithManager(mgr); err != nil {
		return err
	}
	go watchExporters(ctx)
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("cache did not sync")
	}
	return nil
}
