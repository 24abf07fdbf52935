// SPDX-License-Identifier: Apache-2.0

// Command demo runs trainops on a local simulated GPU cluster: etcd,
// kube-apiserver, controller-manager, scheduler and kwok with GPU nodes (the
// same control plane the tests use), then `trainops run` against it, then
// the examples/ resources. It reports progress until everything has settled,
// prints a summary, and keeps running until Ctrl-C (DEMO_ONCE=1: exit after
// the summary).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/check"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/gitops"
	"github.com/trainops/trainops/internal/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) {
	fmt.Printf("[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// demo is one run of the demo: the local cluster, the Git server and the
// trainops process it started.
type demo struct {
	root, dir string
	env       *testenv.Env
	c         client.Client
	gitea     *testenv.Gitea
	// work is the repository's work tree, whose origin is Gitea's.
	work string
	// head is the last commit the demo pushed.
	head string
	// hookAddr and secretFile are the push webhook's; arrival says how a
	// push reaches trainops.
	hookAddr, secretFile, arrival string
	metricsAddr, logPath          string
	trainops                      *testenv.Process
}

func run() error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if testenv.InNodeNamespace() {
		return realTrainingInside(ctx) // this program, run again by realTraining
	}
	d := &demo{root: root, dir: nonEmpty(os.Getenv("DEMO_DIR"), filepath.Join(root, ".cache", "demo"))}
	if err := os.RemoveAll(d.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	if err := d.startCluster(ctx); err != nil {
		return err
	}
	defer func() {
		say("stopping the local cluster")
		_ = d.env.Stop()
	}()
	if err := d.serveRepo(ctx); err != nil {
		return err
	}
	defer d.gitea.Stop()
	token, err := d.addEncryptedSecret(ctx)
	if err != nil {
		return err
	}
	stopTrainops, err := d.startTrainops()
	if err != nil {
		return err
	}
	defer stopTrainops()
	if err := d.waitSettled(ctx, 5*time.Minute); err != nil || ctx.Err() != nil {
		return err
	}
	if err := d.checkSecret(ctx, token); err != nil || ctx.Err() != nil {
		return err
	}
	if err := d.checkStatus(ctx); err != nil || ctx.Err() != nil {
		return err
	}
	if err := realTraining(); err != nil {
		return err
	}
	d.printWelcome()
	if os.Getenv("DEMO_ONCE") == "1" {
		say("DEMO_ONCE=1: everything settled, stopping")
		return nil
	}
	say("press Ctrl-C to stop")
	select {
	case <-ctx.Done():
	case <-d.trainops.Done():
		return fmt.Errorf("trainops exited: %v", d.trainops.Err())
	}
	return nil
}

// startCluster starts the simulated GPU cluster with what a monitored
// cluster with storage has: Prometheus Operator's ServiceMonitor CRD and
// volumes for the examples' claims.
func (d *demo) startCluster(ctx context.Context) error {
	say("starting a local cluster: etcd, kube-apiserver, controller-manager, scheduler, kwok with 4 GPU nodes × 8 GPUs and a CPU node")
	env, err := testenv.Start(ctx, testenv.Options{Full: true, GPUNodes: demoGPUNodes, GPUsPerNode: demoGPUsPerNode, CPUNodes: 1, Dir: d.dir, Progress: progressWriter{}})
	if err != nil {
		return err
	}
	d.env = env
	if d.c, err = client.New(env.Config, client.Options{Scheme: controller.NewScheme()}); err != nil {
		return err
	}
	if err := applyFile(ctx, d.c, filepath.Join(d.root, "testdata", "crds", "servicemonitors.monitoring.coreos.com.yaml")); err != nil {
		return err
	}
	for i := 0; i < 3; i++ {
		if err := d.c.Create(ctx, demoVolume(fmt.Sprintf("demo-volume-%d", i))); err != nil {
			return err
		}
	}
	return d.startKueue(ctx)
}

// serveRepo serves examples/ from a Gitea on 127.0.0.1 whose push
// webhook calls trainops, signed with Gitea's own signature, and which
// shows each revision's commit status.
func (d *demo) serveRepo(ctx context.Context) error {
	say("starting Gitea on 127.0.0.1, serving examples/ as the repository training-config")
	g, err := testenv.StartGitea(ctx, filepath.Join(d.dir, "gitea"))
	if err != nil {
		return err
	}
	d.gitea = g
	if _, err := g.CreateRepo(ctx, demoRepo); err != nil {
		return err
	}
	files, err := readTree(filepath.Join(d.root, "examples"))
	if err != nil {
		return err
	}
	d.work = filepath.Join(d.dir, demoRepo)
	if d.head, err = g.Push(ctx, d.work, demoRepo, files); err != nil {
		return err
	}
	secret := randomHex()
	d.secretFile = filepath.Join(d.dir, "webhook-secret")
	if err := os.WriteFile(d.secretFile, []byte(secret), 0o600); err != nil {
		return err
	}
	if d.hookAddr, err = testenv.FreeAddr(); err != nil {
		return err
	}
	if d.metricsAddr, err = testenv.FreeAddr(); err != nil {
		return err
	}
	if err := g.AddPushHook(ctx, demoRepo, "http://"+d.hookAddr+"/hook", secret); err != nil {
		return err
	}
	if err := ensureNamespace(ctx, d.c, trainopsNS); err != nil {
		return err
	}
	d.arrival = fmt.Sprintf("Gitea's webhook brings the push to trainops at once (%s), and the commit's status says what became of it:\n                curl -s %s/api/v1/repos/%s/%s/commits/main/statuses", d.hookAddr, g.URL, g.User, demoRepo)
	return d.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: trainopsNS, Name: demoStatusSecret}, Data: map[string][]byte{"token": []byte(g.Token)}})
}

// readTree is every file under dir, by path relative to it.
func readTree(dir string) (map[string]string, error) {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		r, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(r)] = string(b)
		return nil
	})
	return files, err
}

// startTrainops starts `trainops run` against the repository; the function
// it returns stops it.
func (d *demo) startTrainops() (func(), error) {
	d.logPath = filepath.Join(d.dir, "trainops.log")
	say("starting trainops run against %s (log: %s)", d.gitea.RepoURL(demoRepo), rel(d.root, d.logPath))
	tr, err := testenv.StartProcess(d.logPath, nonEmpty(os.Getenv("TRAINOPS_BIN"), filepath.Join(d.root, "bin", "trainops")), "run",
		"--kubeconfig="+d.env.Kubeconfig,
		"--namespace="+trainopsNS,
		"--allowed-kinds="+strings.Join(append(config.KindNames(check.DefaultAllowedKinds), "Secret"), ","),
		"--decryption-secret-ref="+demoKeysSecret,
		"--repo-url="+d.gitea.RepoURL(demoRepo),
		"--commit-status-provider=gitea",
		"--commit-status-secret-ref="+demoStatusSecret,
		"--repo-branch=main",
		"--repo-path=clusters/dev",
		"--reconcile-interval=30s",
		"--webhook-bind-address="+d.hookAddr,
		"--webhook-secret-file="+d.secretFile,
		"--cache-dir="+filepath.Join(d.dir, "git-cache"),
		"--metrics-bind-address="+d.metricsAddr,
		"--health-probe-bind-address=0",
		"--leader-election=false",
		"--log-format=console")
	if err != nil {
		return nil, fmt.Errorf("start trainops (run make build first): %w", err)
	}
	d.trainops = tr
	return func() { tr.Stop(15 * time.Second) }, nil
}

// waitSettled prints each sync and each change of the cluster's summary
// until every example has settled.
func (d *demo) waitSettled(ctx context.Context, timeout time.Duration) error {
	deadline := time.After(timeout)
	last, synced := "", ""
	queued := false
	for {
		if !queued {
			var err error
			if queued, err = d.ensureLocalQueue(ctx); err != nil {
				return err
			}
		}
		if inv, err := gitops.ReadInventory(ctx, d.c, "trainops-system", gitops.DefaultName); err == nil && inv.LastAppliedRevision != synced {
			synced = inv.LastAppliedRevision
			say("sync applied %s: %d objects from Git; the reconcilers take it from here", synced, len(inv.Entries))
		}
		st, done, err := summarize(ctx, d.c)
		if err != nil {
			return err
		}
		if st != last {
			say("%s", st)
			last = st
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-d.trainops.Done():
			return fmt.Errorf("trainops exited: %v (see %s)", d.trainops.Err(), rel(d.root, d.logPath))
		case <-deadline:
			return fmt.Errorf("not settled after %s: %s (see %s)", timeout, last, rel(d.root, d.logPath))
		case <-time.After(time.Second):
		}
	}
}

func (d *demo) printWelcome() {
	fmt.Printf(`
trainops is running on a local simulated GPU cluster, synced from Git.

  kubeconfig:   %[1]s
  look around:  export KUBECONFIG=$PWD/%[1]s PATH=$PWD/bin/controlplane/current:$PATH
                kubectl get pyjobs,sreagents,clusterpolicies -A
                kubectl get jobs,pods -n ml-team
                kubectl get daemonsets -n gpu-operator
                bin/trainops status
                kubectl get secret -n ml-team hf-token   (SOPS-encrypted in Git: %[3]s/clusters/dev/secrets)
  trainops log: %[2]s
  metrics:      http://%[5]s/metrics

  try a change: cd %[3]s
                (edit a file under base/ or clusters/dev/, e.g. add a PyJob, then)
                git add -A && git commit -m "another job" && git push
                %[4]s

`, rel(d.root, d.env.Kubeconfig), rel(d.root, d.logPath), d.work, d.arrival, d.metricsAddr)
}

// summarize reports the example resources' state, and whether every PyJob
// succeeded, every SREAgent is ready and the ClusterPolicy is ready.
func summarize(ctx context.Context, c client.Client) (string, bool, error) {
	var parts []string
	done := true
	var pjs trainingv1alpha1.PyJobList
	if err := c.List(ctx, &pjs); err != nil {
		return "", false, err
	}
	sort.Slice(pjs.Items, func(i, j int) bool { return pjs.Items[i].Name < pjs.Items[j].Name })
	for _, pj := range pjs.Items {
		parts = append(parts, fmt.Sprintf("PyJob %s: %s", pj.Name, nonEmpty(string(pj.Status.Phase), "new")))
		done = done && pj.Status.Phase == trainingv1alpha1.PyJobSucceeded
	}
	var agents aiopsv1alpha1.SREAgentList
	if err := c.List(ctx, &agents); err != nil {
		return "", false, err
	}
	for _, a := range agents.Items {
		state := "not ready"
		if conditions.IsReady(&a) {
			state = fmt.Sprintf("ready (%d replica)", a.Status.ReadyReplicas)
		}
		parts = append(parts, fmt.Sprintf("SREAgent %s: %s", a.Name, state))
		done = done && conditions.IsReady(&a)
	}
	var cps gpuv1alpha1.ClusterPolicyList
	if err := c.List(ctx, &cps); err != nil {
		return "", false, err
	}
	for _, cp := range cps.Items {
		var comps []string
		for _, comp := range cp.Status.Components {
			comps = append(comps, fmt.Sprintf("%s %d/%d", comp.Name, comp.Ready, comp.Desired))
		}
		parts = append(parts, fmt.Sprintf("ClusterPolicy %s: %s [%s]", cp.Name, nonEmpty(string(cp.Status.State), "new"), strings.Join(comps, ", ")))
		done = done && cp.Status.State == gpuv1alpha1.StateReady
	}
	return strings.Join(parts, "; "), done && len(pjs.Items) > 0 && len(agents.Items) > 0 && len(cps.Items) > 0, nil
}

func applyFile(ctx context.Context, c client.Client, path string) error {
	objs, err := readObjects(path)
	if err != nil {
		return err
	}
	for _, u := range objs {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("trainops-demo"), client.ForceOwnership); err != nil {
			return fmt.Errorf("%s: apply %s %s: %w", path, u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

func readObjects(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func randomHex() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// demoVolume is a volume any claim can bind to. No pod really mounts it:
// kwok runs no containers.
func demoVolume(name string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Ti")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/trainops-demo/" + name}},
		},
	}
}

type progressWriter struct{}

func (progressWriter) Write(p []byte) (int, error) {
	say("  %s", strings.TrimSpace(string(p)))
	return len(p), nil
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil {
		return r
	}
	return p
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
