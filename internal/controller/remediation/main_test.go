// SPDX-License-Identifier: Apache-2.0

package remediation_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/controller/remediation"
	"github.com/trainops/trainops/internal/gpuhealth/gpuhealthtest"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/testenv/gpustacktest"
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
	b, err := gpuhealthtest.Read(name)
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
		if err := k8s.List(ctx, &pods, client.InNamespace(gpustacktest.Namespace), client.MatchingLabels{"app": builder.DCGMExporterDaemonSet}); err == nil {
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
func start(ctx context.Context, e *testenv.Env) (err error) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(false)))
	for _, n := range e.GPUNodeNames() {
		x := &exporter{body: sample("healthy.prom")}
		x.srv = httptest.NewServer(x)
		exporters[n] = x
	}
	k8s, err = gpustacktest.Start(ctx, e, func(mgr ctrl.Manager, deps children.Deps) error {
		return (&remediation.Reconciler{Deps: deps, Dial: dial, ReadSimulatedNodes: true}).SetupWithManager(mgr)
	})
	if err == nil {
		go watchExporters(ctx)
	}
	return err
}
