// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// The real node's GPUs are advertised to its kubelet by NVIDIA's own
// device plugin (k8s-device-plugin, built unmodified by
// hack/build-node.sh), which finds them through NVML: the stand-in
// libnvidia-ml.so.1 (hack/tools/nvml, answering from go-nvml's DGX A100
// mock), under the driver root as a driver container places its
// libraries, with a device node for each GPU beside it.
const (
	// StandInGPUs is how many GPUs the NVML stand-in reports: the DGX
	// A100 mock's.
	StandInGPUs = 8
	// DriverRoot is the real node's driver root: where a driver container
	// mounts its root file system, and where the stand-in is.
	DriverRoot = gpuStackDir + "/driver"
	// nvidiaMajor is the character-device major of NVIDIA's GPU device
	// nodes, /dev/nvidia<minor>, and of /dev/nvidiactl, whose minor is
	// nvidiaCtlMinor.
	nvidiaMajor    = 195
	nvidiaCtlMinor = 255
	// uvmMajor is the major of /dev/nvidia-uvm and nvidia-uvm-tools. The
	// kernel gives the module one at load; this is one it may give.
	uvmMajor = 510
	// nvmlLibDir is where a driver's libraries are under its root.
	nvmlLibDir = "usr/lib/x86_64-linux-gnu"
)

// installDriverRoot lays out under DriverRoot what a driver container
// places there: the NVML stand-in and the CUDA stand-in as the driver's
// libnvidia-ml.so.<version> and libcuda.so.<version>, with the links to
// them its installer makes (ldconfig's .so.1, libcuda.so), and the device
// nodes of the GPUs (/dev/nvidia<minor>; the mock numbers them by index)
// and of the driver (nvidiactl, nvidia-uvm, nvidia-uvm-tools). NVIDIA's
// CDI spec generators find the driver, and its version, by these names.
// The nodes name devices this machine lacks: a container given one
// starts, and opening it fails, as on a node whose driver is gone.
func installDriverRoot(bin string) error {
	m, err := readStandIn(bin)
	if err != nil {
		return err
	}
	version := m.DriverVersion
	lib := filepath.Join(DriverRoot, nvmlLibDir)
	dev := filepath.Join(DriverRoot, "dev")
	for _, d := range []string{lib, dev} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, name := range []string{"libnvidia-ml.so", "libcuda.so"} {
		versioned := name + "." + version
		if err := copyFile(filepath.Join(bin, "nvidia", name+".1"), filepath.Join(lib, versioned)); err != nil {
			return err
		}
		if err := relink(versioned, filepath.Join(lib, name+".1")); err != nil {
			return err
		}
	}
	if err := relink("libcuda.so.1", filepath.Join(lib, "libcuda.so")); err != nil {
		return err
	}
	nodes := map[string]uint32{"nvidiactl": nvidiaCtlMinor}
	for minor := range StandInGPUs {
		nodes[fmt.Sprintf("nvidia%d", minor)] = uint32(minor)
	}
	for name, minor := range nodes {
		if err := mknod(filepath.Join(dev, name), nvidiaMajor, minor); err != nil {
			return err
		}
	}
	for name, minor := range map[string]uint32{"nvidia-uvm": 0, "nvidia-uvm-tools": 1} {
		if err := mknod(filepath.Join(dev, name), uvmMajor, minor); err != nil {
			return err
		}
	}
	return nil
}

// StandIn is the machine the NVML stand-in answers as: go-nvml's DGX A100
// mock, as hack/tools/nvml/machine describes it.
type StandIn struct {
	// DriverVersion is the driver's version, which names its libraries.
	DriverVersion string
	// GPUName and GPUMemoryMiB are each GPU's name and memory.
	GPUName      string
	GPUMemoryMiB int
	// PCI are the GPUs' PCI devices.
	PCI []PCIDevice
}

// PCIDevice is one GPU's PCI device.
type PCIDevice struct {
	// Address is its name under /sys/bus/pci/devices.
	Address string
	// ID is its device ID (high half) and vendor ID (low), NVML's
	// pciDeviceId.
	ID uint32
}

// StandInMachine describes the machine the NVML stand-in answers as.
func StandInMachine() (StandIn, error) {
	bin, err := NodeBinDir()
	if err != nil {
		return StandIn{}, err
	}
	return readStandIn(bin)
}

// readStandIn reads the description hack/build-node.sh wrote into bin.
func readStandIn(bin string) (StandIn, error) {
	path := filepath.Join(bin, "nvidia", "machine")
	raw, err := os.ReadFile(path)
	if err != nil {
		return StandIn{}, err
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	var m StandIn
	if len(lines) < 2 {
		return StandIn{}, fmt.Errorf("%s describes no machine:\n%s", path, raw)
	}
	if f := strings.Fields(lines[0]); len(f) == 2 {
		m.DriverVersion = f[0]
	}
	if mem, name, ok := strings.Cut(lines[1], " "); ok {
		m.GPUName = name
		m.GPUMemoryMiB, _ = strconv.Atoi(mem)
	}
	for _, l := range lines[2:] {
		var d PCIDevice
		if _, err := fmt.Sscanf(l, "%s %v", &d.Address, &d.ID); err != nil {
			return StandIn{}, fmt.Errorf("%s: %q: %w", path, l, err)
		}
		m.PCI = append(m.PCI, d)
	}
	if m.DriverVersion == "" || m.GPUName == "" || m.GPUMemoryMiB == 0 || len(m.PCI) != StandInGPUs {
		return StandIn{}, fmt.Errorf("%s describes no machine of %d GPUs:\n%s", path, StandInGPUs, raw)
	}
	return m, nil
}

// mknod makes the character device node path, unless it exists.
func mknod(path string, major, minor uint32) error {
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("device node %s: %w", path, err)
	}
	return nil
}

// relink makes link a symbolic link to target, replacing what is there.
func relink(target, link string) error {
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Symlink(target, link)
}

// StartDevicePlugin runs NVIDIA's device plugin on the real node as the
// ClusterPolicy cp's device plugin DaemonSet runs it: its container's
// environment, with each path the pod mounts from the node (the driver
// root, its configuration file) read as the node's own. It replaces the
// plugin running, and waits until the node's allocatable nvidia.com/gpu
// is want.
func (e *Env) StartDevicePlugin(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, want int) error {
	bin, err := NodeBinDir()
	if err != nil {
		return err
	}
	env, err := devicePluginEnv(cp, filepath.Join(e.Dir, "device-plugin"))
	if err != nil {
		return err
	}
	if e.devicePlugin != nil {
		e.devicePlugin.Stop(10 * time.Second)
	}
	logs := filepath.Join(e.Dir, "logs")
	// The log is appended to: this plugin's lines start at its end.
	var from int64
	if fi, err := os.Stat(filepath.Join(logs, "nvidia-device-plugin.log")); err == nil {
		from = fi.Size()
	}
	p, err := startProc("nvidia-device-plugin", filepath.Join(bin, "nvidia", "nvidia-device-plugin"), nil, logs, env...)
	if err != nil {
		return err
	}
	e.devicePlugin = p
	// The node may advertise want already, from the plugin replaced: wait
	// for this one's registration (after its CDI spec, when it writes one).
	err = waitFor(p, "nvidia-device-plugin", 2*time.Minute, func() error {
		raw, err := os.ReadFile(p.logPath)
		if err != nil {
			return err
		}
		if !strings.Contains(string(raw[min(from, int64(len(raw))):]), "Registered device plugin for") {
			return errors.New("not registered with the kubelet yet")
		}
		return nil
	})
	if err != nil {
		return err
	}
	return e.waitNodeReady(ctx, want)
}

// devicePluginEnv is the environment of cp's device plugin container, run
// on the node (componentEnv).
func devicePluginEnv(cp *gpuv1alpha1.ClusterPolicy, dir string) ([]string, error) {
	return componentEnv(cp, builder.DevicePluginDaemonSet, "nvidia-device-plugin", dir)
}

// componentEnv is the environment of the container ctrName of cp's
// DaemonSet dsName, run on the node: a path under one of the pod's mounts
// becomes the path it mounts (a ConfigMap's files are written under dir),
// and a field reference its value on the real node. The device plugin's
// entrypoint adds the driver root from the driver validation's file; the
// driver's libraries are on the library path as the NVIDIA runtime's hook
// puts them into the container (nvidia-container-cli, a C program not
// built here).
func componentEnv(cp *gpuv1alpha1.ClusterPolicy, dsName, ctrName, dir string) ([]string, error) {
	var ds *appsv1.DaemonSet
	files := map[string]map[string]string{}
	for _, o := range builder.ForClusterPolicy(cp, builder.GPUNodes{}).Objects {
		switch o := o.(type) {
		case *appsv1.DaemonSet:
			if o.Name == dsName {
				ds = o
			}
		case *corev1.ConfigMap:
			files[o.Name] = o.Data
		}
	}
	if ds == nil {
		return nil, fmt.Errorf("ClusterPolicy %s has no %s", cp.Name, dsName)
	}
	pod := ds.Spec.Template.Spec
	var ctr *corev1.Container
	for i := range pod.Containers {
		if pod.Containers[i].Name == ctrName {
			ctr = &pod.Containers[i]
		}
	}
	if ctr == nil {
		return nil, fmt.Errorf("%s has no %s container", ds.Name, ctrName)
	}
	onNode := map[string]string{} // mount path: the node's path
	for _, v := range pod.Volumes {
		for _, m := range ctr.VolumeMounts {
			if m.Name != v.Name {
				continue
			}
			switch {
			case v.HostPath != nil:
				onNode[m.MountPath] = v.HostPath.Path
			case v.ConfigMap != nil:
				d := filepath.Join(dir, v.Name)
				if err := writeFiles(d, files[v.ConfigMap.Name]); err != nil {
					return nil, err
				}
				onNode[m.MountPath] = d
			}
		}
	}
	// A path under nested mounts is the innermost one's.
	nodePath := func(p string) string {
		best := ""
		for mount := range onNode {
			if (p == mount || strings.HasPrefix(p, mount+"/")) && len(mount) > len(best) {
				best = mount
			}
		}
		if best == "" {
			return p
		}
		return onNode[best] + strings.TrimPrefix(p, best)
	}
	fields := map[string]string{"spec.nodeName": RealNodeName, "metadata.namespace": ds.Namespace}
	var env []string
	for _, v := range ctr.Env {
		switch {
		case v.ValueFrom == nil:
			env = append(env, v.Name+"="+nodePath(v.Value))
		case v.ValueFrom.FieldRef != nil && fields[v.ValueFrom.FieldRef.FieldPath] != "":
			env = append(env, v.Name+"="+fields[v.ValueFrom.FieldRef.FieldPath])
		default:
			return nil, fmt.Errorf("%s: env %s is neither a value nor a known field", ds.Name, v.Name)
		}
	}
	return append(env,
		"NVIDIA_DRIVER_ROOT="+DriverRoot, "NVIDIA_DEV_ROOT="+DriverRoot,
		"DRIVER_ROOT_CTR_PATH="+nodePath("/driver-root"),
		"LD_LIBRARY_PATH="+filepath.Join(DriverRoot, nvmlLibDir)), nil
}

// writeFiles writes each file of files (name: content) into dir, afresh.
func writeFiles(dir string, files map[string]string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyFile copies src to dst, executable.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
