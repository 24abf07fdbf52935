// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"google.golang.org/protobuf/encoding/protowire"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

// TestToolkitConfiguresContainerd: the NVIDIA Container Toolkit's own
// installer (nvidia-toolkit, built from the module proxy at the release the
// GPU Operator ships), run with the environment trainops gives its toolkit
// DaemonSet, adds the nvidia handlers to the real node's containerd 2
// configuration (version 3) and restarts containerd the way it does on a
// node: it signals containerd, which exits, and the node's supervisor starts
// it again. A pod that ran before keeps its container, and a pod of
// RuntimeClass nvidia starts through the toolkit's runtime.
func TestToolkitConfiguresContainerd(t *testing.T) {
	testenv.RequireRealNode(t, env)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	before := runPause(ctx, t, cs, "before-toolkit", nil)
	restoreContainerd(t)
	installToolkit(t, isolated(gpuv1alpha1.IsolationStrict))
	handlers := runtimeHandlers(t)
	for _, h := range []string{"nvidia", "nvidia-cdi", "nvidia-legacy"} {
		if !strings.HasPrefix(handlers[h], testenv.ToolkitInstallDir+"/toolkit/nvidia-container-runtime") {
			t.Errorf("containerd's %s handler runs %q, not the toolkit's runtime under %s", h, handlers[h], testenv.ToolkitInstallDir)
		}
	}
	bin, err := testenv.NodeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if handlers["runc"] != filepath.Join(bin, "runc") {
		t.Errorf("the runc handler runs %q, no longer the node's runc: %v", handlers["runc"], handlers)
	}

	ensureRuntimeClass(ctx, t, cs, builder.RuntimeClassName)
	id := runPause(ctx, t, cs, "nvidia-runtime", ptr.To(builder.RuntimeClassName))
	if got := containerRuntime(ctx, t, id); got != handlers["nvidia"] {
		t.Errorf("the nvidia pod's container runs %q, want the toolkit's %q", got, handlers["nvidia"])
	}
	p, err := cs.CoreV1().Pods("default").Get(ctx, "before-toolkit", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := p.Status.ContainerStatuses; len(st) == 0 || st[0].ContainerID != "containerd://"+before || st[0].RestartCount != 0 {
		t.Errorf("the pod that ran before containerd's restart did not keep its container %s: %+v", before, st)
	}
}

// installToolkit runs the toolkit's installer as its DaemonSet's container
// would on the real node, for a ClusterPolicy whose containerRuntime is
// rt, until it has configured containerd and containerd has been started
// again: the container's environment from trainops's builder, its paths
// taken through the DaemonSet's host mounts to the node's own folders, and
// the toolkit image's /usr/bin (the programs the installer copies) in a
// mount namespace of its own. It runs once (NO_DAEMON), and again if it
// exits before containerd restarted, as the kubelet restarts the
// DaemonSet's container: the installer takes containerd's PID from the
// credentials of a message on containerd's socket, and turns credentials
// on only after it connected; when containerd's first bytes come before
// that, the PID reads 0 and its SIGHUP goes to its own process group (seen
// here: it ended this test's shell before the installer had a group of its
// own). It runs with --ignore-errors: libnvidia-container and
// nvidia-container-cli are C, not served by the Go module proxy, so their
// installation fails.
func installToolkit(t *testing.T, rt gpuv1alpha1.ContainerRuntimeSpec) {
	t.Helper()
	cp := &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "toolkit"}}
	cp.Spec.ContainerRuntime = rt
	cp.Spec.ContainerRuntime.ConfigPath, cp.Spec.ContainerRuntime.SocketPath = env.ContainerdConfig(), env.ContainerdSocket()
	var ds *appsv1.DaemonSet
	for _, o := range builder.ForClusterPolicy(cp, builder.OfflineGPUNodes).Objects {
		if d, ok := o.(*appsv1.DaemonSet); ok && d.Name == builder.ToolkitDaemonSet {
			ds = d
		}
	}
	if ds == nil {
		t.Fatal("no toolkit DaemonSet")
	}
	bin, err := testenv.NodeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	nvidia := filepath.Join(bin, "nvidia")
	logPath := filepath.Join(env.Dir, "logs", "nvidia-toolkit.log")
	t.Cleanup(func() {
		if t.Failed() {
			raw, _ := os.ReadFile(logPath)
			t.Logf("nvidia-toolkit's log:\n%s", raw)
		}
	})
	restarts := env.ContainerdRestarts()
	for attempt := 1; env.ContainerdRestarts() == restarts; attempt++ {
		if attempt > 5 {
			t.Fatalf("containerd was not restarted after %d runs of the installer", attempt-1)
		}
		log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
			fmt.Sprintf("mount --bind %s /usr/bin && exec %s --ignore-errors", nvidia, filepath.Join(nvidia, "nvidia-toolkit")))
		cmd.Env = append(hostEnv(ds.Spec.Template.Spec, ds.Spec.Template.Spec.Containers[0]), "NO_DAEMON=true", "PATH="+os.Getenv("PATH"))
		cmd.Stdout, cmd.Stderr = log, log
		// A process group of its own, as its container would have: the
		// installer's stray SIGHUP must not reach this test.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		err = cmd.Run()
		_ = log.Close()
		if err != nil {
			t.Fatalf("nvidia-toolkit, run %d: %v", attempt, err)
		}
		// containerd is started again a moment after it exits.
		deadline := time.Now().Add(10 * time.Second)
		for env.ContainerdRestarts() == restarts && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := env.WaitContainerd(time.Minute); err != nil {
		t.Fatal(err)
	}
}

// restoreContainerd puts the real node's containerd configuration back as
// it is now, and restarts containerd, when the test ends: the tests after
// run on the node as it was.
func restoreContainerd(t *testing.T) {
	t.Helper()
	original, err := os.ReadFile(env.ContainerdConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(env.ContainerdConfig(), original, 0o644); err != nil {
			t.Error(err)
		}
		if err := env.RestartContainerd(); err != nil {
			t.Error(err)
		}
	})
}

// hostEnv is ctr's environment with every path under one of its host
// mounts turned into the node's path, as the installer would see the
// node's files through them.
func hostEnv(ps corev1.PodSpec, ctr corev1.Container) []string {
	hostPath := map[string]string{}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			hostPath[v.Name] = v.HostPath.Path
		}
	}
	var out []string
	for _, e := range ctr.Env {
		if e.ValueFrom != nil {
			continue
		}
		value, best := e.Value, ""
		for _, m := range ctr.VolumeMounts {
			host, ok := hostPath[m.Name]
			mount := strings.TrimSuffix(m.MountPath, "/")
			if ok && (value == mount || strings.HasPrefix(value, mount+"/")) && len(mount) > len(best) {
				best, value = mount, host+strings.TrimPrefix(e.Value, mount)
			}
		}
		out = append(out, e.Name+"="+value)
	}
	return out
}

// runtimeHandlers reads the real node's containerd configuration: the
// program each CRI runtime handler runs.
func runtimeHandlers(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(env.ContainerdConfig())
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Version int
		Plugins map[string]struct {
			Containerd struct {
				Runtimes map[string]struct {
					Options struct{ BinaryName string }
				}
			}
		}
	}
	if err := toml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("containerd's configuration: %v\n%s", err, raw)
	}
	if cfg.Version != 3 {
		t.Fatalf("containerd's configuration is version %d, want 3", cfg.Version)
	}
	out := map[string]string{}
	for name, r := range cfg.Plugins["io.containerd.cri.v1.runtime"].Containerd.Runtimes {
		out[name] = r.Options.BinaryName
	}
	return out
}

// containerRuntime is the program containerd runs the container id with
// (its runc options' BinaryName), from containerd's own record of it.
func containerRuntime(ctx context.Context, t *testing.T, id string) string {
	t.Helper()
	bin, err := testenv.NodeBinDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "ctr"), "--address", env.ContainerdSocket(), "-n", "k8s.io", "containers", "info", id).Output()
	if err != nil {
		t.Fatalf("ctr containers info %s: %v", id, err)
	}
	var info struct {
		Runtime struct {
			Options struct {
				TypeURL string `json:"type_url"`
				Value   []byte `json:"value"`
			}
		}
	}
	if err := json.Unmarshal(out, &info); err != nil || info.Runtime.Options.TypeURL != "containerd.runc.v1.Options" {
		t.Fatalf("ctr containers info %s: %v\n%s", id, err, out)
	}
	// The runc shim's options message: binary_name is its field 6.
	for b := info.Runtime.Options.Value; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		b = b[n:]
		if num == 6 && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			return string(v)
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			break
		}
		b = b[n:]
	}
	return ""
}

// ensureRuntimeClass creates the RuntimeClass of handler name, as the
// ClusterPolicy does, unless it exists.
func ensureRuntimeClass(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: name}
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// runPause runs the pause image on the real node, in the RuntimeClass
// runtimeClass (nil: the default) with env, until the test ends; it returns
// its container's ID once it runs, never having failed.
func runPause(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, runtimeClass *string, env ...corev1.EnvVar) string {
	t.Helper()
	createPause(ctx, t, cs, name, runtimeClass, nil, env...)
	return waitRunning(ctx, t, cs, name)
}

// isolated is a containerRuntime with isolation i, the rest defaults.
func isolated(i gpuv1alpha1.GPUIsolation) gpuv1alpha1.ContainerRuntimeSpec {
	return gpuv1alpha1.ContainerRuntimeSpec{Isolation: i}
}

// waitRunning waits until the pod name of default runs, its container
// never having failed, and returns the container's ID.
func waitRunning(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	var id string
	testenv.Eventually(t, 2*time.Minute, func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil || p.Status.ContainerStatuses[0].RestartCount > 0 {
			return fmt.Errorf("%s: phase %s; events: %q", name, p.Status.Phase, podEvents(ctx, cs, name))
		}
		id = strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
		return nil
	})
	return id
}

// createPause creates the pod runPause runs, with limits (none when nil),
// deleted when the test ends; it returns the pod's UID.
func createPause(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, runtimeClass *string, limits corev1.ResourceList, env ...corev1.EnvVar) string {
	t.Helper()
	refs, err := testenv.Images()
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector:     map[string]string{"kubernetes.io/hostname": testenv.RealNodeName},
			RuntimeClassName: runtimeClass,
			Containers: []corev1.Container{{Name: "pause", Image: refs["pause.tar"], ImagePullPolicy: corev1.PullNever, Env: env,
				Resources: corev1.ResourceRequirements{Limits: limits}}},
		},
	}
	created, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	return string(created.UID)
}

// podEvents are the messages of the Events about the pod name, with their
// reasons.
func podEvents(ctx context.Context, cs kubernetes.Interface, name string) []string {
	var notes []string
	if evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name}); err == nil {
		for _, e := range evs.Items {
			notes = append(notes, e.Reason+": "+e.Message)
		}
	}
	return notes
}
