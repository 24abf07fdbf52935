// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

// TestStrictIsolationGivesNoGPUWithoutALimit: with the toolkit installed
// as trainops configures it by default (containerRuntime.isolation
// Strict), the NVIDIA runtime handles a pod that sets
// NVIDIA_VISIBLE_DEVICES=all without a GPU limit (its hook is in the pod's
// OCI spec, as in every container's) and the pod starts with nothing of
// NVIDIA's: no device or mount in its spec, its mount namespace or its
// /dev, and the hook never calls nvidia-container-cli. A pod with a limit
// of two makes the hook ask nvidia-container-cli for exactly the two GPUs
// NVIDIA's device plugin allocated it. Installed with the GPU Operator's
// default (Envvar), the hook asks for every GPU for the pod without a
// limit. That is proof that the runtime read the variable, and that Strict
// is what kept it out.
//
// nvidia-container-cli (libnvidia-container) is C and not built here: where
// the toolkit's hook calls it, a recorder notes what the hook asked and
// fails, so a pod that gets that far does not start.
func TestStrictIsolationGivesNoGPUWithoutALimit(t *testing.T) {
	testenv.RequireRealNode(t, env)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	restoreContainerd(t)
	ensureRuntimeClass(ctx, t, cs, builder.RuntimeClassName)
	nvidia := ptr.To(builder.RuntimeClassName)
	all := corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}

	installToolkit(t, isolated(gpuv1alpha1.IsolationStrict))
	skipDriverCheck(t)
	asked := recordCLI(t)
	runPause(ctx, t, cs, "no-gpu-asked", nvidia)
	id := runPause(ctx, t, cs, "all-gpus-no-limit", nvidia, all)
	// Proof that the NVIDIA runtime handled this container: in legacy mode
	// it adds its hook to every container's spec, and the hook decides.
	hooks, injected := nvidiaInjections(bundleSpec(t, id))
	if len(hooks) == 0 {
		t.Fatalf("the NVIDIA runtime did not handle the pod: no NVIDIA hook in its spec")
	}
	if got := append(injected, received(t, id)...); len(got) > 0 {
		t.Errorf("under strict isolation a pod without a GPU limit received: %v", got)
	}
	if calls := asked(); len(calls) > 0 {
		t.Errorf("under strict isolation the hook asked nvidia-container-cli for a pod without a GPU limit: %q", calls)
	}
	uid := createPause(ctx, t, cs, "two-gpus", nvidia, corev1.ResourceList{testenv.GPUResource: resource.MustParse("2")})
	var devices []string
	// The kubelet retries a container that failed to start: each try
	// calls the hook again.
	testenv.Eventually(t, 2*time.Minute, func() error {
		calls := asked()
		if len(calls) == 0 {
			return fmt.Errorf("no nvidia-container-cli call for the two-GPU pod; events %q", podEvents(ctx, cs, "two-gpus"))
		}
		devices = cliDevices(calls[0])
		return nil
	})
	_, byPod := kubeletDevices(t)
	allocated := byPod[uid]
	slices.Sort(allocated)
	slices.Sort(devices)
	if len(devices) != 2 || !slices.Equal(devices, allocated) {
		t.Errorf("the hook asked for GPUs %v; the device plugin allocated the pod %v (want the same two)", devices, allocated)
	}
	deletePod(ctx, t, cs, "two-gpus")

	installToolkit(t, isolated(gpuv1alpha1.IsolationEnvvar))
	skipDriverCheck(t)
	asked = recordCLI(t)
	createPause(ctx, t, cs, "all-gpus-envvar", nvidia, nil, all)
	testenv.Eventually(t, 2*time.Minute, func() error {
		calls := asked()
		if len(calls) == 0 || !slices.Equal(cliDevices(calls[0]), []string{"all"}) {
			return fmt.Errorf("nvidia-container-cli calls %q, want one for every GPU; events %q", calls, podEvents(ctx, cs, "all-gpus-envvar"))
		}
		return nil
	})
}

// deletePod deletes the pod name at once and waits until it is gone.
func deletePod(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if _, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s still there (%v)", name, err)
		}
		return nil
	})
}

// recordCLI puts a recorder where the installed toolkit's hook finds
// nvidia-container-cli: the path its config.toml names or, with none (the
// installer had no CLI to install), the first folder of the hook's search,
// usr/bin under the driver root the configuration names. Each call appends
// its arguments to a file, and fails. It returns a function listing the
// calls so far.
func recordCLI(t *testing.T) func() []string {
	t.Helper()
	cfg := filepath.Join(testenv.ToolkitInstallDir, "toolkit", ".config", "nvidia-container-runtime", "config.toml")
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	section := string(raw)[max(strings.Index(string(raw), "[nvidia-container-cli]"), 0):]
	value := func(key string) string {
		if m := regexp.MustCompile(`(?m)^\s*` + key + ` = "([^"]*)"`).FindStringSubmatch(section); m != nil {
			return m[1]
		}
		return ""
	}
	cli := value("path")
	if cli == "" {
		if value("root") == "" {
			t.Fatalf("the toolkit's configuration names neither nvidia-container-cli nor a driver root:\n%s", raw)
		}
		cli = filepath.Join(value("root"), "usr", "bin", "nvidia-container-cli")
	}
	record := filepath.Join(t.TempDir(), "calls")
	script := fmt.Sprintf("#!/bin/sh\necho \"$*\" >> %s\necho 'nvidia-container-cli is not on this node' >&2\nexit 1\n", record)
	if err := os.MkdirAll(filepath.Dir(cli), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cli, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(cli) })
	return func() []string {
		raw, _ := os.ReadFile(record)
		return strings.FieldsFunc(string(raw), func(r rune) bool { return r == '\n' })
	}
}

// cliDevices is the --device list of an nvidia-container-cli call.
func cliDevices(call string) []string {
	for _, arg := range strings.Fields(call) {
		if v, ok := strings.CutPrefix(arg, "--device="); ok {
			return strings.Split(v, ",")
		}
	}
	return nil
}

// skipDriverCheck takes out of the toolkit's installed runtime wrapper its
// check that the NVIDIA kernel module is loaded: without one (this machine
// has no GPU, nor even /proc/modules) it hands every container straight to
// runc, so the runtime's own decisions would never be seen. The rest of
// the wrapper, its configuration and the runtime are the installer's.
func skipDriverCheck(t *testing.T) {
	t.Helper()
	path := filepath.Join(testenv.ToolkitInstallDir, "toolkit", "nvidia-container-runtime")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	script := string(raw)
	start := strings.Index(script, "cat /proc/modules")
	end := strings.Index(script[max(start, 0):], "\nfi\n")
	if start < 0 || end < 0 {
		t.Fatalf("the toolkit's runtime wrapper no longer checks for the driver as this test expects:\n%s", script)
	}
	script = script[:start] + script[start+end+len("\nfi\n"):]
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// ociSpec is what these tests read of an OCI runtime spec (config.json):
// its hooks, devices and mounts.
type ociSpec struct {
	Hooks map[string][]struct {
		Path string   `json:"path"`
		Args []string `json:"args"`
	} `json:"hooks"`
	Linux struct {
		Devices []struct {
			Path string `json:"path"`
		} `json:"devices"`
	} `json:"linux"`
	Mounts []struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	} `json:"mounts"`
}

// bundleSpec is the OCI spec the runtime ran the container id with, as the
// NVIDIA runtime left it in the bundle.
func bundleSpec(t *testing.T, id string) ociSpec {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(env.ContainerBundle(id), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s ociSpec
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// nvidiaInjections lists what of NVIDIA's a spec holds: hooks, and devices
// and mounts with nvidia in their path.
func nvidiaInjections(s ociSpec) (hooks, injected []string) {
	for kind, hs := range s.Hooks {
		for _, h := range hs {
			if strings.Contains(h.Path, "nvidia") || strings.Contains(strings.Join(h.Args, " "), "nvidia") {
				hooks = append(hooks, kind+" hook "+h.Path)
			}
		}
	}
	for _, d := range s.Linux.Devices {
		if strings.Contains(d.Path, "nvidia") {
			injected = append(injected, "device "+d.Path)
		}
	}
	for _, m := range s.Mounts {
		if strings.Contains(m.Source, "nvidia") || strings.Contains(m.Destination, "nvidia") {
			injected = append(injected, "mount "+m.Destination)
		}
	}
	return hooks, injected
}

// received lists what of NVIDIA's reached the running container id, as
// the node sees it through the container's first process: mounts in its
// mount namespace and device nodes in its /dev (the hook's
// nvidia-container-cli would put them there, outside the spec).
func received(t *testing.T, id string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(env.ContainerBundle(id), "init.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(raw))
	mountinfo, err := os.ReadFile(filepath.Join("/proc", pid, "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(mountinfo), "\n") {
		if strings.Contains(l, "nvidia") {
			out = append(out, "mount "+l)
		}
	}
	devs, err := os.ReadDir(filepath.Join("/proc", pid, "root", "dev"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if strings.HasPrefix(d.Name(), "nvidia") {
			out = append(out, "device /dev/"+d.Name())
		}
	}
	return out
}
