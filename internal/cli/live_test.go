// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/decrypt"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/render"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	render.ServeIfChild() // a test that renders starts this binary as the child
	os.Exit(testenv.Main(m, testenv.Options{}, &env))
}

// copyDir copies a folder of files (the flat base of the examples) to one
// the test may change.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, filepath.Base(p)), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	// A flat kustomization over the copied files.
	var k strings.Builder
	k.WriteString("resources:\n")
	for _, f := range []string{"namespace.yaml", "bert-training.yaml", "distributed-training.yaml", "gpu-monitor-agent.yaml", "gpu-cluster-config.yaml"} {
		k.WriteString("- " + f + "\n")
	}
	if err := os.WriteFile(filepath.Join(dst, "kustomization.yaml"), []byte(k.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// syncEngine is a sync engine against the test's cluster, its inventory
// in namespace home (made here), allowed kinds and decrypting with keys.
func syncEngine(t *testing.T, home string, kinds []schema.GroupKind, keys *decrypt.Keys) (*gitops.Engine, client.Client) {
	t.Helper()
	httpClient, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(env.Config, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme(), Mapper: mapper})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: home}})
	e := &gitops.Engine{Client: c, Mapper: mapper, Log: logr.Discard(), Keys: keys, Opts: gitops.Options{
		Name: gitops.DefaultName, Namespace: home, Path: ".", AllowedKinds: kinds,
		Prune: true, PruneBudget: config.Budget{Percent: 100}, Force: true, Concurrency: 4,
	}}
	if err := e.Connect(env.Config, httpClient); err != nil {
		t.Fatal(err)
	}
	return e, c
}

func TestLiveDiffAgainstTheCluster(t *testing.T) {
	ctx := context.Background()
	e, c := syncEngine(t, "trainops-system", check.DefaultAllowedKinds, nil)
	dir := copyDir(t, filepath.Join(examples, "base"))
	if _, err := e.Sync(ctx, dir, "main@sha1:0000000000000000000000000000000000000001"); err != nil {
		t.Fatal(err)
	}
	args := []string{"diff", "--cluster", "--repo", dir, "--kubeconfig", env.Kubeconfig, "--no-color"}
	out, errOut, code := run(t, args...)
	if code != ExitOK || !strings.Contains(out, "no changes") {
		t.Fatalf("just synced: exit %d, %q %q", code, out, errOut)
	}

	// A new PyJob, an agent change, a removed file, and a PyJob change the
	// API server refuses.
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}
	write("new-job.yaml", strings.Replace(read("bert-training.yaml"), "name: bert-training", "name: bert-large", 1))
	write("gpu-monitor-agent.yaml", strings.Replace(read("gpu-monitor-agent.yaml"), "autoRepair: true", "autoRepair: false", 1))
	write("bert-training.yaml", strings.Replace(read("bert-training.yaml"), "gpu: 1", "gpu: 2", 1))
	write("kustomization.yaml", strings.Replace(strings.Replace(read("kustomization.yaml"), "- distributed-training.yaml\n", "", 1), "- namespace.yaml\n", "- namespace.yaml\n- new-job.yaml\n", 1))
	out, errOut, code = run(t, args...)
	if code != ExitChanges {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	mustContain(t, "live diff", out,
		"+ create PyJob ml-team/bert-large",
		"~ update SREAgent ml-team/gpu-monitor-agent",
		"-  autoRepair: true",
		"- delete PyJob ml-team/distributed-training",
		"~ update PyJob ml-team/bert-training",
		"will be refused",
		"gpu cannot change once the PyJob is created",
	)

	// What the head leaves as synced is not in the diff.
	for _, absent := range []string{"Namespace ml-team", "ClusterPolicy gpu-cluster-config"} {
		if strings.Contains(out, absent) {
			t.Errorf("live diff shows %q, which the sync would not change:\n%s", absent, out)
		}
	}

	// An inventory the diff cannot read is an error, not an empty prune.
	inv := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: "trainops-system", Name: gitops.DefaultName + "-inventory"}
	if err := c.Get(ctx, key, inv); err != nil {
		t.Fatal(err)
	}
	saved := inv.DeepCopy()
	inv.BinaryData["entries.json.gz"] = []byte("not gzip")
	if err := c.Update(ctx, inv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cur := &corev1.ConfigMap{}
		if err := c.Get(context.Background(), key, cur); err == nil {
			cur.BinaryData = saved.BinaryData
			_ = c.Update(context.Background(), cur)
		}
	})
	out, errOut, code = run(t, args...)
	if code != ExitUsage || !strings.Contains(errOut, "inventory trainops-system/trainops-inventory") {
		t.Fatalf("unreadable inventory: exit %d, %q %q", code, out, errOut)
	}
}
