// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/testenv"
)

// TestCDIGivesAPodExactlyItsGPUs: with CDI on and the default (a
// ClusterPolicy's containerRuntime.cdi enabled and default), NVIDIA's
// device plugin writes the CDI spec of the node's GPUs from NVML (the
// stand-in) and the driver root, and hands a container its GPUs by CDI
// annotation; the toolkit's runtime, in CDI mode, edits the container's OCI
// spec from that spec itself, with no nvidia-container-cli. A pod asking two
// GPUs then runs with exactly the device nodes of the two the plugin
// allocated it, and the driver's libraries mounted, in its spec and in
// the running container. A pod setting NVIDIA_VISIBLE_DEVICES=all without
// a limit runs through the same runtime with nothing of NVIDIA's. Installed
// with the GPU Operator's default (isolation Envvar), the same pod gets
// every GPU of the toolkit's management spec: proof that the runtime read
// the variable, and that strict isolation is what kept it out.
func TestCDIGivesAPodExactlyItsGPUs(t *testing.T) {
	testenv.RequireRealNode(t, env)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	restoreContainerd(t)
	ensureRuntimeClass(ctx, t, cs, builder.RuntimeClassName)
	nvidia := ptr.To(builder.RuntimeClassName)
	all := corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}
	cdi := gpuv1alpha1.CDISpec{Enabled: true, Default: true}

	cp := &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cdi"}}
	cp.Spec.ContainerRuntime.CDI = cdi
	t.Cleanup(func() {
		if t.Failed() {
			raw, _ := os.ReadFile(filepath.Join(env.Dir, "logs", "nvidia-device-plugin.log"))
			t.Logf("the device plugin's log:\n%s", raw)
		}
		// The tests after this one expect the plugin of a default
		// ClusterPolicy, and no CDI spec.
		if err := env.StartDevicePlugin(ctx, &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, testenv.StandInGPUs); err != nil {
			t.Error(err)
		}
		specs, _ := filepath.Glob(filepath.Join(testenv.CDISpecDir, "*"))
		for _, s := range specs {
			_ = os.Remove(s)
		}
	})
	if err := env.StartDevicePlugin(ctx, cp, testenv.StandInGPUs); err != nil {
		t.Fatal(err)
	}
	gpus := pluginCDIDevices(t)
	if len(gpus) != testenv.StandInGPUs {
		t.Fatalf("the device plugin's CDI spec names %d GPUs, want %d: %v", len(gpus), testenv.StandInGPUs, gpus)
	}

	installToolkit(t, gpuv1alpha1.ContainerRuntimeSpec{CDI: cdi})
	skipDriverCheck(t)
	handlers := runtimeHandlers(t)
	id := runPause(ctx, t, cs, "cdi-all-gpus-no-limit", nvidia, all)
	if got := containerRuntime(ctx, t, id); got != handlers[builder.RuntimeClassName] {
		t.Fatalf("the pod ran with %q, not the NVIDIA runtime %q", got, handlers[builder.RuntimeClassName])
	}
	_, injected := nvidiaInjections(bundleSpec(t, id))
	if got := append(injected, received(t, id)...); len(got) > 0 {
		t.Errorf("under strict isolation a pod without a GPU limit received: %v", got)
	}

	uid := createPause(ctx, t, cs, "cdi-two-gpus", nvidia, corev1.ResourceList{testenv.GPUResource: resource.MustParse("2")})
	id = waitRunning(ctx, t, cs, "cdi-two-gpus")
	_, byPod := kubeletDevices(t)
	allocated := byPod[uid]
	if len(allocated) != 2 {
		t.Fatalf("the device plugin allocated the pod %v, want two GPUs", allocated)
	}
	var want []string
	for _, gpu := range allocated {
		want = append(want, gpus[gpu]...)
	}
	spec := bundleSpec(t, id)
	var inSpec []string
	for _, d := range spec.Linux.Devices {
		if gpuNode.MatchString(d.Path) {
			inSpec = append(inSpec, d.Path)
		}
	}
	var inContainer []string
	for _, r := range received(t, id) {
		if p, ok := strings.CutPrefix(r, "device "); ok && gpuNode.MatchString(p) {
			inContainer = append(inContainer, p)
		}
	}
	for _, got := range [][]string{want, inSpec, inContainer} {
		slices.Sort(got)
	}
	if len(want) != 2 || !slices.Equal(inSpec, want) || !slices.Equal(inContainer, want) {
		t.Errorf("the pod allocated %v (device nodes %v per the plugin's CDI spec) has %v in its OCI spec and %v in its /dev", allocated, want, inSpec, inContainer)
	}
	t.Logf("the pod given %v received %q", allocated, received(t, id))
	if lib := "libcuda.so." + driverVersion(t); !slices.ContainsFunc(received(t, id), func(r string) bool { return strings.Contains(r, lib) }) {
		t.Errorf("the driver's %s is not mounted in the pod given GPUs: %v", lib, received(t, id))
	}
	deletePod(ctx, t, cs, "cdi-two-gpus")

	installToolkit(t, gpuv1alpha1.ContainerRuntimeSpec{CDI: cdi, Isolation: gpuv1alpha1.IsolationEnvvar})
	skipDriverCheck(t)
	id = runPause(ctx, t, cs, "cdi-all-gpus-envvar", nvidia, all)
	var every []string
	for _, d := range bundleSpec(t, id).Linux.Devices {
		if gpuNode.MatchString(d.Path) {
			every = append(every, d.Path)
		}
	}
	if len(every) != testenv.StandInGPUs {
		t.Errorf("under the GPU Operator's default the pod without a limit got GPU device nodes %v, want all %d", every, testenv.StandInGPUs)
	}
}

// gpuNode matches the device node of one GPU.
var gpuNode = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

// pluginCDIDevices reads the CDI spec NVIDIA's device plugin wrote: the
// device nodes of each GPU, by the name it gives the GPU (its UUID, the ID
// it registers with the kubelet).
func pluginCDIDevices(t *testing.T) map[string][]string {
	t.Helper()
	path := filepath.Join(testenv.CDISpecDir, "k8s.device-plugin.nvidia.com-gpu.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the device plugin wrote no CDI spec: %v", err)
	}
	var spec struct {
		Kind    string
		Devices []struct {
			Name           string
			ContainerEdits struct {
				DeviceNodes []struct{ Path string }
			}
		}
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string][]string{}
	for _, d := range spec.Devices {
		for _, n := range d.ContainerEdits.DeviceNodes {
			out[d.Name] = append(out[d.Name], n.Path)
		}
	}
	if spec.Kind != "k8s.device-plugin.nvidia.com/gpu" {
		t.Fatalf("%s is of kind %q", path, spec.Kind)
	}
	return out
}

// driverVersion is the version of the driver the node's stand-ins stand
// for.
func driverVersion(t *testing.T) string {
	t.Helper()
	m, err := testenv.StandInMachine()
	if err != nil {
		t.Fatal(err)
	}
	return m.DriverVersion
}
