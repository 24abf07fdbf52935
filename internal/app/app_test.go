// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/render"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	render.ServeIfChild() // a test that renders starts this binary as the child
	ctrl.SetLogger(zap.New(zap.WriteTo(logSink), zap.UseDevMode(false)))
	os.Exit(testenv.Main(m, testenv.Options{Full: true, GPUNodes: 2, CPUNodes: 1}, &env))
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestRunServesHealthMetricsAndLeads(t *testing.T) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "trainops-system"}}
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	metrics, health := freeAddr(t), freeAddr(t)
	cfg := config.Run{
		Controllers:    config.DefaultControllers("v1.0.0"),
		MetricsAddr:    metrics,
		HealthAddr:     health,
		LeaderElection: true,
		Namespace:      "trainops-system",
		LogFormat:      "console",
	}
	cfg.Sync.AllowNodeName = true
	cfg.Sync.AllowedVolumeTypes = []string{"nfs", "csi"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, env.Config) }()

	deadline := time.Now().Add(60 * time.Second)
	check := func() error {
		for _, path := range []string{"/healthz", "/readyz"} {
			code, _, err := get("http://" + health + path)
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("%s: %d %v", path, code, err)
			}
		}
		code, body, err := get("http://" + metrics + "/metrics")
		if err != nil || code != http.StatusOK || !strings.Contains(body, `controller_runtime_reconcile_total{controller="pyjob"`) {
			return fmt.Errorf("metrics: %d %v", code, err)
		}
		var lease coordinationv1.Lease
		l, err := cs.CoordinationV1().Leases("trainops-system").Get(context.Background(), LeaderElectionID, metav1.GetOptions{})
		if err != nil {
			return err
		}
		lease = *l
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return fmt.Errorf("lease has no holder")
		}
		// The settings the API server's admission policy reads are this
		// run's.
		cm, err := cs.CoreV1().ConfigMaps("trainops-system").Get(context.Background(), config.PolicyConfigMap, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm.Data["allowNodeName"] != "true" || cm.Data["allowedVolumeTypes"] != "nfs,csi" || cm.Data["allowPrivileged"] != "false" {
			return fmt.Errorf("published admission settings: %v", cm.Data)
		}
		return nil
	}
	var last error
	for time.Now().Before(deadline) {
		if last = check(); last == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run ended early: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if last != nil {
		t.Fatal(last)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v on shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop after its context was cancelled")
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	cfg := config.Run{Namespace: "x", LogFormat: "json", Controllers: config.Controllers{MaxConcurrentReconciles: 0, RetryDelay: time.Second, AgentImage: "x"}}
	err := Run(context.Background(), cfg, env.Config)
	if err == nil || !strings.Contains(err.Error(), "maxConcurrentReconciles") {
		t.Fatalf("err %v, want one naming maxConcurrentReconciles", err)
	}
}
