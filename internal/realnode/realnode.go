// SPDX-License-Identifier: Apache-2.0

// Package realnode runs trainops's reconcilers against a test environment
// with a real node, ready to train: for the tests that need containers to
// really run (its _test files), `make bench`'s real-node figure and
// `make demo`'s real training run.
package realnode

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/eventrec"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/internal/workload"
)

// SimulatedTaint keeps pods off the kwok nodes, which run nothing: every
// pod a real-node test makes runs on the real node.
const SimulatedTaint = "trainops.test/simulated"

// Images are the references pods name `make image`'s images by on the
// real node: in the node's registry, pulled with a pull Secret.
type Images struct {
	Training, Trainops string
}

// Prepare readies e's real node for training: it pushes the training and
// trainops images to the node's registry and taints every kwok node with
// SimulatedTaint.
func Prepare(ctx context.Context, e *testenv.Env, c client.Client) (*Images, error) {
	dir, err := testenv.ImageDir()
	if err != nil {
		return nil, err
	}
	refs, err := testenv.Images()
	if err != nil {
		return nil, err
	}
	out := &Images{}
	if out.Training, err = e.PushImage(ctx, filepath.Join(dir, "pytorch.tar"), refs["pytorch.tar"], "trainops/pytorch-cpu"); err != nil {
		return nil, err
	}
	if out.Trainops, err = e.PushImage(ctx, filepath.Join(dir, "trainops.tar"), refs["trainops.tar"], "trainops/trainops"); err != nil {
		return nil, err
	}
	for _, name := range e.Nodes {
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return nil, err
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: SimulatedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule})
		if err := c.Update(ctx, n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// PullSecret is the name of the Secret Namespace makes for the node's
// registry.
const PullSecret = "registry-credentials"

// Namespace makes a namespace whose pods pull from the node's registry, as
// a team's namespace in a cluster with a private registry does: a pull
// Secret, named on its default ServiceAccount (whose pods the API server
// gives it). It returns the namespace's name (prefix and a suffix).
func Namespace(ctx context.Context, e *testenv.Env, c client.Client, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(ctx, ns); err != nil {
		return "", err
	}
	if err := PullSecretIn(ctx, e, c, ns.Name); err != nil {
		return "", err
	}
	ref := []corev1.LocalObjectReference{{Name: PullSecret}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}, ImagePullSecrets: ref}
	err := c.Create(ctx, sa)
	if apierrors.IsAlreadyExists(err) { // the controller-manager's, first
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(sa), sa); err != nil {
				return err
			}
			sa.ImagePullSecrets = ref
			return c.Update(ctx, sa)
		})
	}
	return ns.Name, err
}

// Release deletes the namespace ns and waits for its pods to be gone: the
// node's GPUs are few, and the kubelet tearing pods down weighs on what
// runs next.
func Release(ctx context.Context, c client.Client, ns string) error {
	if err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return nil
		}
	}
	return fmt.Errorf("the pods of %s are still there after 2m", ns)
}

// PullSecretIn makes the pull Secret for the node's registry in ns.
func PullSecretIn(ctx context.Context, e *testenv.Env, c client.Client, ns string) error {
	return c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: PullSecret, Namespace: ns},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       e.PullSecretData(),
	})
}

// RunReconcilers runs trainops's reconcilers against e until ctx ends, its
// log in e's logs folder, SREAgents without spec.image running agentImage.
func RunReconcilers(ctx context.Context, e *testenv.Env, agentImage string) error {
	logFile, err := os.Create(filepath.Join(e.Dir, "logs", "trainops.log"))
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logFile)))
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 controller.NewScheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controller.CacheOptions(),
	})
	if err != nil {
		return err
	}
	ev, err := eventrec.Attach(mgr, nil)
	if err != nil {
		return err
	}
	cfg := config.Controllers{MaxConcurrentReconciles: 4, RetryDelay: 2 * time.Second, AgentImage: agentImage}
	if err := controller.Setup(mgr, nil, cfg, workload.Policy{}, ev, nil); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "trainops's reconcilers:", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("the reconcilers' cache did not sync")
	}
	return nil
}

// TrainScript is testdata/realnode/train.py: a small data-parallel run
// with torch.distributed over gloo that logs each rank's loss and writes a
// checkpoint from rank 0.
func TrainScript() (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, "testdata", "realnode", "train.py"))
	return string(b), err
}

// DistributedPyJob is a PyJob of 2 workers × 2 processes that runs script
// with torchrun from image on the real node, writing to the claim named
// output (when output is not empty) at /output.
func DistributedPyJob(ns, name, image, script, output string) *trainingv1alpha1.PyJob {
	pj := &trainingv1alpha1.PyJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: trainingv1alpha1.PyJobSpec{
			Image: image,
			// torchrun reads the rendezvous from the PET_* variables
			// trainops sets; --no_python runs python3 -c script.
			Command: []string{"torchrun", "--no_python", "python3", "-c", script},
			GPU:     2,
			Workers: 2,
			// The kwok nodes have GPUs too, and run nothing.
			NodeSelector: map[string]string{"kubernetes.io/hostname": testenv.RealNodeName},
		},
	}
	if output != "" {
		pj.Spec.OutputPath = "/output"
		pj.Spec.Storage = &trainingv1alpha1.PyJobStorage{Output: &trainingv1alpha1.OutputVolume{ClaimName: output}}
	}
	return pj
}

// Cluster is a test environment with a real node, ready to train: the
// training image loaded, the kwok nodes tainted, trainops's reconcilers
// running.
type Cluster struct {
	Env    *testenv.Env
	Client client.Client
	Images *Images
	// Script is TrainScript.
	Script string
}

// Start starts a Cluster (inside the node's namespace: see
// testenv.RunInNodeNamespace), its progress to progress when not nil. The
// reconcilers run until ctx ends; Stop the Env when done.
func Start(ctx context.Context, progress io.Writer) (_ *Cluster, err error) {
	e, err := testenv.Start(ctx, testenv.Options{RealNode: true, GPUNodes: 1, GPUsPerNode: 4, Progress: progress})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = e.Stop()
		}
	}()
	k := &Cluster{Env: e}
	if k.Client, err = client.New(e.Config, client.Options{Scheme: controller.NewScheme()}); err != nil {
		return nil, err
	}
	if k.Images, err = Prepare(ctx, e, k.Client); err != nil {
		return nil, err
	}
	if err := RunReconcilers(ctx, e, k.Images.Trainops); err != nil {
		return nil, err
	}
	k.Script, err = TrainScript()
	return k, err
}
