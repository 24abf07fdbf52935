// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/app"
	"github.com/trainops/trainops/internal/gitserver"
	"github.com/trainops/trainops/internal/signature"
	"github.com/trainops/trainops/internal/testenv"
)

// TestTrainopsInCluster: trainops installed by `helm install` of
// charts/trainops runs from `make image`'s image on the real node, two
// replicas, and syncs a repository from a Git server with credentials
// (reached on the node's bridge). A push reaches its webhook through its
// Service and is applied at once; when the leader's pod is killed, the
// other replica takes the lease and goes on syncing.
func TestTrainopsInCluster(t *testing.T) {
	testenv.RequireRealNode(t, env)
	ctx := context.Background()
	srv, err := gitserver.Start("fleet", "s3cret-token")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	repo, err := srv.NewRepo("fleet.git", "main", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(repo.Close)
	push := func(value string) {
		t.Helper()
		repo.MustWrite(t, "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml-real\n")
		repo.MustWrite(t, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hello\n  namespace: ml-real\ndata:\n  value: "+value+"\n")
		if _, err := repo.CommitAndPush("value " + value); err != nil {
			t.Fatal(err)
		}
	}
	push("one")
	gitAddr, stop, err := testenv.ForwardToNode(strings.TrimPrefix(srv.HTTPAddress(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	const ns = "trainops-real"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]map[string]string{
		"fleet-git":     {"username": "fleet", "password": "s3cret-token"},
		"fleet-webhook": {"token": "hook-secret"},
	} {
		if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: data}); err != nil {
			t.Fatal(err)
		}
	}
	installChart(t, ns, map[string]any{
		"repo":              map[string]any{"url": "http://" + gitAddr + "/fleet.git", "secretName": "fleet-git"},
		"webhook":           map[string]any{"enabled": true, "secretName": "fleet-webhook"},
		"reconcileInterval": "1h", // only the webhook makes it sync again soon
		"allowedNamespaces": []any{"ml-real"},
	})
	waitValue(t, "one", 3*time.Minute)

	// A push, through the webhook's Service.
	svc := &corev1.Service{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "trainops"}, svc); err != nil {
		t.Fatal(err)
	}
	hook := fmt.Sprintf("http://%s:9292/hook", svc.Spec.ClusterIP)
	push("two")
	// The Service's endpoints reach kube-proxy's rules a moment after the
	// pods are ready: until then a connection is refused.
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := signature.Push(hook, []byte("hook-secret")); err != nil {
			return fmt.Errorf("push to the webhook's Service: %w", err)
		}
		return nil
	})
	waitValue(t, "two", time.Minute)

	// The leader dies; the other replica leads and syncs the next push.
	leader := leaseHolder(t, ns)
	if err := k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: leader}}, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() error {
		if h := leaseHolder(t, ns); h == leader || h == "" {
			return fmt.Errorf("lease still held by %q", h)
		}
		return nil
	})
	push("three")
	testenv.Eventually(t, time.Minute, func() error { return signature.Push(hook, []byte("hook-secret")) })
	waitValue(t, "three", time.Minute)
}

// installChart installs charts/trainops as release trainops in ns with
// values, from `make image`'s image, and uninstalls it when the test ends.
func installChart(t *testing.T, ns string, values map[string]any) {
	t.Helper()
	chrt, err := loader.Load(filepath.Join("..", "..", "charts", "trainops"))
	if err != nil {
		t.Fatal(err)
	}
	// From the node's registry, with the release namespace's pull Secret.
	i := strings.LastIndex(images.Trainops, ":")
	values["image"] = map[string]any{"repository": images.Trainops[:i], "tag": images.Trainops[i+1:], "pullPolicy": "IfNotPresent"}
	values["imagePullSecrets"] = []any{map[string]any{"name": PullSecret}}
	if err := PullSecretIn(context.Background(), env, k8s, ns); err != nil {
		t.Fatal(err)
	}
	values["resources"] = map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "128Mi"}, "limits": map[string]any{"memory": "512Mi"}}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &env.Kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.Wait, install.Timeout = "trainops", ns, true, 3*time.Minute
	if _, err := install.Run(chrt, values); err != nil {
		t.Fatalf("helm install: %v\n%s", err, podLogs(t, ns, "trainops"))
	}
	t.Cleanup(func() { _, _ = action.NewUninstall(cfg).Run("trainops") })
}

// waitValue waits for the ConfigMap the repository holds to carry value;
// failing, it shows trainops's logs.
func waitValue(t *testing.T, value string, timeout time.Duration) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		cm := &corev1.ConfigMap{}
		if err = k8s.Get(context.Background(), client.ObjectKey{Namespace: "ml-real", Name: "hello"}, cm); err == nil {
			if cm.Data["value"] == value {
				return
			}
			err = fmt.Errorf("value %q, want %q", cm.Data["value"], value)
		}
	}
	t.Fatalf("not true after %s: %v\ntrainops's logs:\n%s", timeout, err, podLogs(t, "trainops-real", "trainops"))
}

// leaseHolder is the pod holding trainops's leader lease in ns.
func leaseHolder(t *testing.T, ns string) string {
	t.Helper()
	lease := &coordinationv1.Lease{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: app.LeaderElectionID}, lease); err != nil {
		return ""
	}
	holder, _, _ := strings.Cut(ptr.Deref(lease.Spec.HolderIdentity, ""), "_")
	return holder
}
