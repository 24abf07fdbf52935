// SPDX-License-Identifier: Apache-2.0

package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/testenv"
)

// helmConfig is Helm's action configuration for the test cluster, with
// releases in ns.
func helmConfig(t *testing.T, ns string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &env.Kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// kubeconfigAs writes a kubeconfig for the test cluster that acts as the
// user named (impersonation), so a process using it has that user's RBAC.
func kubeconfigAs(t *testing.T, user string) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range kc.AuthInfos {
		a.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHelmChartLifecycle installs charts/trainops with Helm's library,
// runs trainops with the settings and ServiceAccount the chart gave it (as
// a process: kwok's pods run no container) until it has synced a
// repository, upgrades a value and sees the Deployment roll, and
// uninstalls: everything goes but the CRDs.
func TestHelmChartLifecycle(t *testing.T) {
	ctx := context.Background()
	bin := testenv.BuildTrainops(t)
	srv, repo := gitRepo(t, "helm.git")
	repo.MustWrite(t, "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ml-helm\n")
	repo.MustWrite(t, "jobs/a.yaml", strings.ReplaceAll(pyjobYAML("job-a"), "ml-e2e", "ml-helm"))
	if _, err := repo.CommitAndPush("one job"); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "trainops-helm"
	chrt, err := loader.Load(filepath.Join("..", "..", "charts", "trainops"))
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{
		"repo":              map[string]any{"url": srv.URL("helm.git")},
		"reconcileInterval": "2s",
		"allowedNamespaces": []any{"ml-helm"},
		"replicas":          1,
	}
	install := action.NewInstall(helmConfig(t, ns))
	install.ReleaseName, install.Namespace, install.CreateNamespace = "trainops", ns, true
	if _, err := install.Run(chrt, values); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "trainops"}, dep); err != nil {
		t.Fatal(err)
	}

	// trainops as the chart runs it: its configuration file, its
	// ServiceAccount's RBAC.
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "trainops-config"}, cm); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(cm.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startTrainops(t, bin, filepath.Join(dir, "trainops.log"), "--config="+cfgFile, "--namespace="+ns,
		"--kubeconfig="+kubeconfigAs(t, "system:serviceaccount:"+ns+":trainops"), "--leader-election=false", "--cache-dir="+filepath.Join(dir, "cache"))
	testenv.Eventually(t, 90*time.Second, func() error {
		inv, err := gitops.ReadInventory(ctx, c, ns, gitops.DefaultName)
		if err != nil {
			return err
		}
		if inv.LastAppliedRevision == "" {
			return fmt.Errorf("not synced yet (last error %q)", inv.LastError)
		}
		return c.Get(ctx, client.ObjectKey{Namespace: "ml-helm", Name: "job-a"}, &trainingv1alpha1.PyJob{})
	})
	p.Stop(time.Minute)

	// A changed setting rolls the pods, which read it at start.
	values["reconcileInterval"] = "5s"
	upgrade := action.NewUpgrade(helmConfig(t, ns))
	upgrade.Namespace = ns
	if _, err := upgrade.Run("trainops", chrt, values); err != nil {
		t.Fatal(err)
	}
	rolled := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dep), rolled); err != nil {
		t.Fatal(err)
	}
	before, after := dep.Spec.Template.Annotations["trainops.dev/config-hash"], rolled.Spec.Template.Annotations["trainops.dev/config-hash"]
	if rolled.Generation == dep.Generation || before == "" || before == after {
		t.Fatalf("helm upgrade of reconcileInterval did not roll the Deployment: generation %d → %d, config hash %q → %q", dep.Generation, rolled.Generation, before, after)
	}
	runShardRelease(t, c, chrt, ns, bin, dir, rolled)
	// A shard's release that names a repository is refused, and nothing
	// of it is made.
	bad := action.NewInstall(helmConfig(t, ns))
	bad.ReleaseName, bad.Namespace, bad.SkipCRDs = "trainops-shard2", ns, true
	if _, err := bad.Run(chrt, map[string]any{"shard": "shard2", "repo": map[string]any{"url": srv.URL("helm.git")}}); err == nil || !strings.Contains(err.Error(), "shard") {
		t.Fatalf("a shard's release with repo.url: %v, want it refused naming shard", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "trainops-shard2"}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused release made its Deployment (err %v)", err)
	}
	if _, err := action.NewUninstall(helmConfig(t, ns)).Run("trainops-shard1"); err != nil {
		t.Fatal(err)
	}
	// The main release keeps its ServiceAccount.
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "trainops"}, &corev1.ServiceAccount{}); err != nil {
		t.Fatalf("uninstalling the shard's release took the main release's ServiceAccount: %v", err)
	}

	if _, err := action.NewUninstall(helmConfig(t, ns)).Run("trainops"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, o := range []client.Object{
			&appsv1.Deployment{}, &corev1.ConfigMap{}, &corev1.Service{}, &corev1.ServiceAccount{},
		} {
			name := "trainops"
			if _, ok := o.(*corev1.ConfigMap); ok {
				name = "trainops-config"
			}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (err %v)", o, name, err)
			}
		}
		for _, name := range []string{"trainops-manager", "trainops-mig-manager"} {
			if err := c.Get(ctx, client.ObjectKey{Name: name}, &rbacv1.ClusterRole{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("ClusterRole %s still there (err %v)", name, err)
			}
		}
		return nil
	})
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := c.Get(ctx, client.ObjectKey{Name: "pyjobs.training.trainops.dev"}, crd); err != nil || !crd.DeletionTimestamp.IsZero() {
		t.Fatalf("helm uninstall took the CRDs (err %v)", err)
	}
}

// runShardRelease installs a shard's release beside the main release
// (Deployment rolled): its own Deployment and configuration, the main
// release's ServiceAccount; and runs it as a process, which holds its own
// lease.
func runShardRelease(t *testing.T, c client.Client, chrt *chart.Chart, ns, bin, dir string, rolled *appsv1.Deployment) {
	t.Helper()
	ctx := context.Background()
	shardInstall := action.NewInstall(helmConfig(t, ns))
	shardInstall.ReleaseName, shardInstall.Namespace, shardInstall.SkipCRDs = "trainops-shard1", ns, true
	// Its policy settings agree with the main release's (a shard enforces
	// the stricter of both, and refuses to start on lists with nothing in
	// common).
	if _, err := shardInstall.Run(chrt, map[string]any{"shard": "shard1", "replicas": 1, "allowedNamespaces": []any{"ml-helm"}}); err != nil {
		t.Fatal(err)
	}
	shardDep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "trainops-shard1"}, shardDep); err != nil {
		t.Fatal(err)
	}
	mainSel, err := metav1.LabelSelectorAsSelector(rolled.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if mainSel.Matches(labels.Set(shardDep.Spec.Template.Labels)) || shardDep.Spec.Template.Spec.ServiceAccountName != "trainops" {
		t.Errorf("the shard's pods (labels %v, ServiceAccount %s) must run as the main release's ServiceAccount and be none of its pods", shardDep.Spec.Template.Labels, shardDep.Spec.Template.Spec.ServiceAccountName)
	}
	shardCM := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "trainops-shard1-config"}, shardCM); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(shardCM.Data["config.yaml"], "shard: shard1") {
		t.Fatalf("the shard's configuration does not name it:\n%s", shardCM.Data["config.yaml"])
	}
	shardFile := filepath.Join(dir, "shard.yaml")
	if err := os.WriteFile(shardFile, []byte(shardCM.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	// Leader election is on in-cluster by default; outside, it is asked for.
	sp := startTrainops(t, bin, filepath.Join(dir, "shard.log"), "--config="+shardFile, "--namespace="+ns, "--leader-election",
		"--kubeconfig="+kubeconfigAs(t, "system:serviceaccount:"+ns+":trainops"), "--cache-dir="+filepath.Join(dir, "shard-cache"))
	testenv.Eventually(t, 60*time.Second, func() error {
		l := &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: config.LeaderElectionID(LeaderElectionID, "shard1")}, l); err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return fmt.Errorf("the shard's lease has no holder")
		}
		return nil
	})
	sp.Stop(time.Minute)
}
