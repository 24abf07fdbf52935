// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
)

// NodeBinDir is where the real node's binaries are: $TRAINOPS_NODE_DIR or
// bin/node/current in the repository.
func NodeBinDir() (string, error) {
	dir := os.Getenv("TRAINOPS_NODE_DIR")
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "bin", "node", "current")
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "nvidia/nvidia-toolkit", "nvidia/nvidia-container-runtime", "nvidia/nvidia-device-plugin", "nvidia/libnvidia-ml.so.1", "kubelet", "kube-proxy", "coredns", "registry", "cni/bridge", "cni/host-local", "cni/loopback", "cni/portmap"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("real-node binary %s not found in %s: run `make testcluster`", b, dir)
		}
	}
	return dir, nil
}

// ImageDir is where `make image` wrote the images (bin/image, or
// $TRAINOPS_IMAGE_DIR), with its index.
func ImageDir() (string, error) {
	dir := os.Getenv("TRAINOPS_IMAGE_DIR")
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "bin", "image")
	}
	if _, err := os.Stat(filepath.Join(dir, "index.txt")); err != nil {
		return "", fmt.Errorf("no images in %s: run `make image`", dir)
	}
	return dir, nil
}

// Images reads the image index: reference by tarball name.
func Images() (map[string]string, error) {
	dir, err := ImageDir()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, "index.txt"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 {
			out[fields[1]] = fields[0]
		}
	}
	return out, sc.Err()
}

// prepareNodeNamespace readies the namespace for the node: loopback up,
// the host-wide folders bound to the environment's own, and the bridge
// with the node's address (before the API server starts, which listens on
// it).
func prepareNodeNamespace(p nodePaths) error {
	for _, d := range hostDirs {
		own := filepath.Join(p.root, "host", strings.ReplaceAll(strings.Trim(d, "/"), "/", "_"))
		if err := os.MkdirAll(own, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(own, d, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s over %s: %w", own, d, err)
		}
		// The GPU stack's pods mount /run/nvidia's folders with
		// HostToContainer propagation, which needs a shared mount, as
		// on a node whose root is shared.
		if d == gpuStackDir {
			if err := syscall.Mount("", d, "", syscall.MS_SHARED, ""); err != nil {
				return fmt.Errorf("make %s shared: %w", d, err)
			}
		}
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", NodeBridge, "type", "bridge"},
		{"addr", "add", NodeIP + "/24", "dev", NodeBridge},
		{"link", "set", NodeBridge, "up"},
		// Service IPs are routed to the bridge, as a node's default route
		// would take them, so the node's own processes reach them
		// through kube-proxy's rules; nothing leaves the namespace.
		{"route", "add", ServiceSubnet, "dev", NodeBridge},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// startNode starts the real node beside the control plane: containerd
// with the images of `make image`, the kubelet, kube-proxy, CoreDNS and
// NVIDIA's device plugin as a default ClusterPolicy runs it, and waits for
// the node to be Ready with the stand-in's GPUs.
func (e *Env) startNode(ctx context.Context, opts Options) error {
	bin, err := NodeBinDir()
	if err != nil {
		return err
	}
	p := newNodePaths(e.Dir)
	logDir := filepath.Join(e.Dir, "logs")
	opts.progress("starting containerd")
	if err := e.startContainerd(ctx, p, bin, logDir); err != nil {
		return err
	}
	opts.progress("starting the image registry on the node's bridge")
	if err := e.startRegistry(p, bin, logDir); err != nil {
		return err
	}
	opts.progress("starting the kubelet")
	if err := e.startKubelet(p, bin, logDir, opts); err != nil {
		return err
	}
	opts.progress("starting kube-proxy and CoreDNS")
	if err := e.startNodeServices(p, bin, logDir); err != nil {
		return err
	}
	if err := installDriverRoot(bin); err != nil {
		return err
	}
	opts.progress("starting NVIDIA's device plugin; waiting for %s to be Ready with %d GPUs", RealNodeName, StandInGPUs)
	return e.StartDevicePlugin(ctx, &gpuv1alpha1.ClusterPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, StandInGPUs)
}

// startContainerd starts containerd and loads the pause image into it.
func (e *Env) startContainerd(ctx context.Context, p nodePaths, bin, logDir string) error {
	for _, d := range []string{p.containerd, p.cniBin, p.cniConf, p.cniData, p.kubelet, p.logs, filepath.Join(p.root, "certs.d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if err := os.Symlink(filepath.Join(bin, "cni", plugin), filepath.Join(p.cniBin, plugin)); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(p.cniConf, "10-trainops.conflist"), []byte(cniConfig(p)), 0o644); err != nil {
		return err
	}
	cfg := e.ContainerdConfig()
	images, err := Images()
	if err != nil {
		return err
	}
	if images["pause.tar"] == "" {
		return errors.New("no pause.tar in the image index: run `make image`")
	}
	if err := os.WriteFile(cfg, []byte(containerdConfig(p, bin, images["pause.tar"], filepath.Join(p.root, "certs.d"))), 0o644); err != nil {
		return err
	}
	// containerd finds its shim, and the shim runc, on its PATH: the
	// node's own first. It is started again whenever it exits.
	sup, err := supervise(func() (*Process, error) {
		return startProc("containerd", filepath.Join(bin, "containerd"), []string{"--config", cfg}, logDir, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	})
	if err != nil {
		return err
	}
	e.containerd = sup
	if err := e.WaitContainerd(30 * time.Second); err != nil {
		return err
	}
	dir, err := ImageDir()
	if err != nil {
		return err
	}
	return e.ImportImage(ctx, filepath.Join(dir, "pause.tar"))
}

// WaitContainerd waits until the real node's containerd answers on its
// socket: after it was started, or started again.
func (e *Env) WaitContainerd(timeout time.Duration) error {
	sock := e.ContainerdSocket()
	deadline := time.Now().Add(timeout)
	for {
		proc := e.containerd.current()
		err := waitFor(proc, "containerd", time.Until(deadline), func() error {
			c, err := net.Dial("unix", sock)
			if err == nil {
				c.Close()
			}
			return err
		})
		// A containerd that exited is started again: wait for that one.
		if err == nil || !proc.Exited() || time.Now().After(deadline) {
			return err
		}
		time.Sleep(restartDelay)
	}
}

// ContainerdConfig and ContainerdSocket are the real node's containerd
// configuration file and socket, as a ClusterPolicy names them
// (containerRuntime.configPath, socketPath).
func (e *Env) ContainerdConfig() string {
	return filepath.Join(newNodePaths(e.Dir).containerd, "config.toml")
}

// ContainerdSocket: see ContainerdConfig.
func (e *Env) ContainerdSocket() string { return newNodePaths(e.Dir).socket() }

// ContainerBundle is the folder where the real node's containerd keeps the
// container id's OCI bundle: config.json there is the spec the OCI runtime
// ran it with.
func (e *Env) ContainerBundle(id string) string {
	return filepath.Join(newNodePaths(e.Dir).containerd, "state", "io.containerd.runtime.v2.task", "k8s.io", id)
}

// RestartContainerd stops the real node's containerd, which is then started
// again, and waits until it answers.
func (e *Env) RestartContainerd() error {
	e.containerd.current().Stop(10 * time.Second)
	return e.WaitContainerd(30 * time.Second)
}

// ContainerdRestarts is how many times the real node's containerd exited
// and was started again.
func (e *Env) ContainerdRestarts() int { return e.containerd.Restarts() }

// ImportImage loads an image tarball into the real node's containerd, as
// `ctr -n k8s.io images import` does.
func (e *Env) ImportImage(ctx context.Context, tarball string) error {
	sock := e.ContainerdSocket()
	bin, err := NodeBinDir()
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "ctr"), "--address", sock, "-n", "k8s.io", "images", "import", "--no-unpack", tarball).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %v: %s", tarball, err, out)
	}
	return nil
}

// startKubelet starts the kubelet as the real node, labelled as Node
// Feature Discovery labels a node with an NVIDIA GPU.
func (e *Env) startKubelet(p nodePaths, bin, logDir string, opts Options) error {
	resolv := filepath.Join(p.root, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver "+NodeIP+"\n"), 0o644); err != nil {
		return err
	}
	cfg := filepath.Join(p.root, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(kubeletConfig(p, os.Getenv(nodeNSEnv), e.pki.CACert, resolv)), 0o644); err != nil {
		return err
	}
	labels := []string{GPUNodeLabel + "=true", "trainops.dev/real-node=true"}
	for k, v := range NFDLabels(hostOS()) {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	proc, err := startProc("kubelet", filepath.Join(bin, "kubelet"), []string{
		"--config=" + cfg,
		"--kubeconfig=" + e.Kubeconfig,
		"--root-dir=/var/lib/kubelet",
		"--hostname-override=" + RealNodeName,
		"--node-ip=" + NodeIP,
		"--node-labels=" + strings.Join(labels, ","),
		"--v=1",
	}, logDir)
	if err != nil {
		return err
	}
	e.procs = append(e.procs, proc)
	e.RealNode = RealNodeName
	return nil
}

// startNodeServices starts kube-proxy and CoreDNS.
func (e *Env) startNodeServices(p nodePaths, bin, logDir string) error {
	ports := make([]int, 4) // kube-proxy's health and metrics, CoreDNS's health and readiness
	for i := range ports {
		var err error
		if ports[i], err = freePort(); err != nil {
			return err
		}
	}
	proxyCfg := filepath.Join(p.root, "kube-proxy.yaml")
	if err := os.WriteFile(proxyCfg, []byte(kubeProxyConfig(e.Kubeconfig, ports[0], ports[1])), 0o644); err != nil {
		return err
	}
	proxy, err := startProc("kube-proxy", filepath.Join(bin, "kube-proxy"), []string{"--config=" + proxyCfg, "--v=1"}, logDir)
	if err != nil {
		return err
	}
	e.procs = append(e.procs, proxy)
	cf := filepath.Join(p.root, "Corefile")
	if err := os.WriteFile(cf, []byte(corefile(e.Kubeconfig, ports[2], ports[3])), 0o644); err != nil {
		return err
	}
	dns, err := startProc("coredns", filepath.Join(bin, "coredns"), []string{"-conf", cf}, logDir)
	if err != nil {
		return err
	}
	e.procs = append(e.procs, dns)
	e.dns = &restartable{proc: dns, bin: filepath.Join(bin, "coredns"), dir: logDir, args: []string{"-conf", cf}}
	if err := waitFor(proxy, "kube-proxy", 60*time.Second, func() error { return httpOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[0])) }); err != nil {
		return err
	}
	return waitFor(dns, "coredns", 60*time.Second, func() error { return httpOK(fmt.Sprintf("http://127.0.0.1:%d/ready", ports[3])) })
}

// waitNodeReady waits for the real node to be Ready with gpus allocatable,
// as long as the device plugin runs.
func (e *Env) waitNodeReady(ctx context.Context, gpus int) error {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	err = waitFor(e.devicePlugin, "nvidia-device-plugin", 2*time.Minute, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
		switch {
		case err != nil:
			return err
		case !nodeReady(n):
			return errors.New("not Ready")
		}
		if q := n.Status.Allocatable[GPUResource]; q.Value() != int64(gpus) {
			return fmt.Errorf("%s allocatable %s, want %d", GPUResource, q.String(), gpus)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("node %s: %w\nkubelet log %s:\n%s", RealNodeName, err, filepath.Join(e.Dir, "logs", "kubelet.log"), tail(filepath.Join(e.Dir, "logs", "kubelet.log"), 25))
	}
	return nil
}

// ForwardToNode makes target (a server on 127.0.0.1) reachable from the
// real node's pods: it listens on the node's bridge address and copies
// each connection to target. It returns the address pods use and a
// function that stops it.
func ForwardToNode(target string) (string, func(), error) {
	l, err := net.Listen("tcp", net.JoinHostPort(NodeIP, "0"))
	if err != nil {
		return "", nil, err
	}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return l.Addr().String(), func() { l.Close() }, nil
}

// StackPeakMiB is the sum of the peak resident memory (VmHWM) of every
// process the environment started: the control plane, and with a real
// node its kubelet, containerd, kube-proxy and CoreDNS (not the
// containers, nor containerd's shims).
func (e *Env) StackPeakMiB() float64 {
	var kib float64
	procs := e.procs
	if e.containerd != nil {
		procs = append(slices.Clone(procs), e.containerd.current())
	}
	for _, p := range procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				var n float64
				_, _ = fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &n)
				kib += n
			}
		}
	}
	return kib / 1024
}

// StopDNS stops the real node's CoreDNS, as a DNS outage would, and
// returns a function that starts it again.
func (e *Env) StopDNS() (restart func() error) {
	old := e.dns.proc
	old.Stop(5 * time.Second)
	return func() error {
		p, err := startProc("coredns", e.dns.bin, e.dns.args, e.dns.dir)
		if err != nil {
			return err
		}
		for i, q := range e.procs {
			if q == old {
				e.procs[i] = p
			}
		}
		e.dns.proc = p
		return nil
	}
}

// hostOS is this machine's OS, as NFD would read it from /etc/os-release
// and the kernel's release.
func hostOS() NodeOS {
	var o NodeOS
	if raw, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			k, v, _ := strings.Cut(l, "=")
			v = strings.Trim(v, `"'`)
			switch k {
			case "ID":
				o.ID = v
			case "VERSION_ID":
				o.VersionID = v
			}
		}
	}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		o.Kernel = strings.TrimSpace(string(raw))
	}
	return o
}
