// SPDX-License-Identifier: Apache-2.0

// Package testenv starts a real local Kubernetes control plane on 127.0.0.1
// for tests, `make demo` and `make bench`: etcd and kube-apiserver with the
// project's CRDs installed (API mode), plus kube-controller-manager,
// kube-scheduler and kwok simulating GPU nodes (full mode), so Jobs,
// Deployments and DaemonSets really get pods that are scheduled, run and
// complete.
//
// The binaries are built from source by `make testcluster` into
// bin/controlplane/current (or $TRAINOPS_CONTROLPLANE_DIR). Every process
// listens on 127.0.0.1 with free ports, dies with the process that started
// it, and is stopped by Env.Stop. Pod and Service IPs in this cluster are
// fiction: nothing may connect to them.
package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options say what to start.
type Options struct {
	// Full also starts kube-controller-manager, kube-scheduler and kwok with
	// simulated nodes. Without it only etcd and kube-apiserver run.
	Full bool
	// GPUNodes is the number of simulated GPU nodes in full mode (default 2).
	GPUNodes int
	// GPUsPerNode is the nvidia.com/gpu capacity of each simulated GPU
	// node (default 8); the real node has the NVML stand-in's StandInGPUs.
	GPUsPerNode int
	// CPUNodes is the number of simulated nodes without GPUs (default 0).
	CPUNodes int
	// Stages are extra kwok Stage documents (YAML), e.g. FailImageStage.
	Stages []string
	// CRDPaths are files or folders of CRDs to install; default the
	// project's config/crd/bases. Set NoCRDs to install none.
	CRDPaths []string
	// NoCRDs installs no CRDs.
	NoCRDs bool
	// Dir holds the cluster's data, certificates and logs; a new temporary
	// folder when empty (removed by Stop).
	Dir string
	// Progress, when set, receives one line per step.
	Progress io.Writer
	// RealNode also runs a real node (kubelet, containerd, runc, kube-proxy,
	// CoreDNS, NVIDIA's device plugin over an NVML stand-in) beside the
	// kwok nodes, in a network namespace of the test binary's own (Main makes it);
	// implies Full. Where the machine cannot (NodeMissing), Main runs the
	// tests without it and RequireRealNode skips those that need it.
	RealNode bool
}

// progress writes one line to Progress, if set.
func (o Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// Env is a running local control plane.
type Env struct {
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for Config.
	Kubeconfig string
	// Dir holds data, certificates and logs.
	Dir string
	// Nodes are the simulated nodes' names (full mode).
	Nodes []string
	// RealNode is the real node's name, when one runs.
	RealNode string
	// RegistryPassword is RegistryUser's, on the real node's registry.
	RegistryPassword string

	removeDir bool
	procs     []*Process
	// etcd and apiserver are kept to restart them with the same settings.
	etcd, apiserver *restartable
	// pki signs the controllers' credentials; full is set once they run.
	pki  *pki
	full bool
	// devicePlugin is NVIDIA's device plugin on the real node.
	devicePlugin *Process
	// gfd is GPU feature discovery on the real node, once StartGFD ran it.
	gfd *Process
	// nfdMaster is Node Feature Discovery's master, once RunNFD started it.
	nfdMaster *Process
	// dns is the real node's CoreDNS, to stop and start again.
	dns *restartable
	// containerd is the real node's containerd, started again whenever it
	// exits.
	containerd *supervisor
}

// restartable is a started process and how to start it again.
type restartable struct {
	proc      *Process
	bin, dir  string
	args      []string
	readiness func(*Process) error
}

// GPUNodeLabel marks simulated GPU nodes as a stock Node Feature Discovery
// marks a node with an NVIDIA 3D controller (class 0302, vendor 0x10de:
// its default deviceLabelFields are class and vendor). It is the only GPU
// label they carry besides nvidia.com/gpu.product (which GPU feature
// discovery would add, and which kwok, running no container, cannot):
// nvidia.com/gpu.present and the nvidia.com/gpu.deploy.* labels are
// trainops's to add, as the GPU Operator's are on a real cluster.
const GPUNodeLabel = "feature.node.kubernetes.io/pci-0302_10de.present"

// NodeOS is a simulated node's operating system, as its /etc/os-release
// and uname give it.
type NodeOS struct {
	ID, VersionID, Kernel string
}

// SimulatedOS are the operating systems of the simulated nodes, node i
// running SimulatedOS[i % len]: GPU clusters mix them, and the driver
// image differs per OS.
var SimulatedOS = []NodeOS{
	{ID: "ubuntu", VersionID: "22.04", Kernel: "5.15.0-105-generic"},
	{ID: "rhel", VersionID: "9.4", Kernel: "5.14.0-427.13.1.el9_4.x86_64"},
}

// NFDLabels are the labels a stock Node Feature Discovery gives any node
// of os from its system and kernel sources (the PCI labels come from the
// node's devices).
func NFDLabels(os NodeOS) map[string]string {
	const p = "feature.node.kubernetes.io/"
	l := map[string]string{
		p + "system-os_release.ID":         os.ID,
		p + "system-os_release.VERSION_ID": os.VersionID,
		p + "kernel-version.full":          os.Kernel,
	}
	major, minor, _ := strings.Cut(os.VersionID, ".")
	l[p+"system-os_release.VERSION_ID.major"] = major
	if minor != "" {
		l[p+"system-os_release.VERSION_ID.minor"] = minor
	}
	k := strings.SplitN(strings.SplitN(os.Kernel, "-", 2)[0], ".", 3)
	for i, part := range []string{"major", "minor", "revision"} {
		if i < len(k) {
			l[p+"kernel-version."+part] = k[i]
		}
	}
	for k, v := range l {
		if v == "" {
			delete(l, k)
		}
	}
	return l
}

// GPUResource is the extended resource of NVIDIA GPUs.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// kwokNodeLabel selects the nodes kwok manages.
const kwokNodeLabel = "type"

// Start brings up a control plane as opts says. On error everything it
// started is stopped.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: opts.Dir}
	if e.Dir == "" {
		if e.Dir, err = os.MkdirTemp("", "trainops-cluster-"); err != nil {
			return nil, err
		}
		e.removeDir = true
	}
	defer func() {
		if err != nil {
			_ = e.Stop()
		}
	}()
	logDir := filepath.Join(e.Dir, "logs")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return nil, err
	}
	progress := opts.progress
	certs, err := newPKI(filepath.Join(e.Dir, "pki"))
	if err != nil {
		return nil, fmt.Errorf("create certificates: %w", err)
	}

	if opts.RealNode {
		if !InNodeNamespace() {
			return nil, errors.New("a real node runs only inside the namespace testenv.Main makes")
		}
		if err := prepareNodeNamespace(newNodePaths(e.Dir)); err != nil {
			return nil, err
		}
	}
	progress("starting etcd")
	etcdURL, err := e.startEtcd(bin, logDir)
	if err != nil {
		return nil, err
	}
	progress("starting kube-apiserver")
	if err := e.startAPIServer(ctx, bin, logDir, etcdURL, certs, opts.RealNode); err != nil {
		return nil, err
	}
	if !opts.NoCRDs {
		paths := opts.CRDPaths
		if len(paths) == 0 {
			root, err := RepoRoot()
			if err != nil {
				return nil, err
			}
			paths = []string{filepath.Join(root, "config", "crd", "bases")}
		}
		progress("installing CRDs")
		if _, err := envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true, MaxTime: time.Minute}); err != nil {
			return nil, fmt.Errorf("install CRDs from %v: %w", paths, err)
		}
	}
	e.pki = certs
	if !opts.Full && !opts.RealNode {
		return e, nil
	}
	if err := e.StartFull(ctx, opts); err != nil {
		return nil, err
	}
	if opts.RealNode {
		if err := e.startNode(ctx, opts); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// StartFull turns a control plane started in API mode into a full one: it
// starts kube-controller-manager, kube-scheduler and kwok with the simulated
// nodes opts asks for (its other fields are not read). `make bench` uses it
// to measure in API mode first and then, on the same cluster, where pods
// are made.
func (e *Env) StartFull(ctx context.Context, opts Options) error {
	if e.pki == nil || e.apiserver == nil {
		return errors.New("no API server to add controllers to")
	}
	if e.full {
		return errors.New("the controllers are already running")
	}
	bin, err := BinDir()
	if err != nil {
		return err
	}
	logDir := filepath.Join(e.Dir, "logs")
	progress := opts.progress
	progress("starting kube-controller-manager and kube-scheduler")
	if err := e.startControllers(ctx, bin, logDir, e.pki); err != nil {
		return err
	}
	if opts.GPUNodes == 0 {
		opts.GPUNodes = 2
	}
	if opts.GPUsPerNode == 0 {
		opts.GPUsPerNode = 8
	}
	progress("starting kwok with %d GPU nodes (%d GPUs each) and %d CPU nodes", opts.GPUNodes, opts.GPUsPerNode, opts.CPUNodes)
	if err := e.startKwok(ctx, bin, logDir, opts); err != nil {
		return err
	}
	e.full = true
	return nil
}

// Stop ends every process, then removes the folder if Start made it.
func (e *Env) Stop() error {
	for _, p := range []*Process{e.gfd, e.devicePlugin} {
		if p != nil {
			p.Stop(10 * time.Second)
		}
	}
	for i := len(e.procs) - 1; i >= 0; i-- {
		e.procs[i].Stop(10 * time.Second)
	}
	e.procs = nil
	if e.containerd != nil {
		e.containerd.Stop(10 * time.Second)
		e.containerd = nil
	}
	if e.RealNode != "" {
		endNode(e.Dir)
	}
	if e.removeDir && e.Dir != "" {
		return os.RemoveAll(e.Dir)
	}
	return nil
}

// RestartAPIServer stops kube-apiserver and etcd and starts them again on
// the same ports with the same data, as an upgrade or a crash would: clients
// see connection errors for the while, then the same cluster.
func (e *Env) RestartAPIServer(down time.Duration) error {
	if e.apiserver == nil || e.etcd == nil {
		return errors.New("no API server to restart")
	}
	e.apiserver.proc.Stop(10 * time.Second)
	e.etcd.proc.Stop(10 * time.Second)
	time.Sleep(down)
	for _, r := range []*restartable{e.etcd, e.apiserver} {
		p, err := startProc(filepath.Base(r.bin), r.bin, r.args, r.dir)
		if err != nil {
			return err
		}
		for i, old := range e.procs {
			if old == r.proc {
				e.procs[i] = p
			}
		}
		r.proc = p
		if err := r.readiness(p); err != nil {
			return err
		}
	}
	return nil
}

// Impersonate returns a client configuration that acts as user (and groups)
// through the API server's impersonation, so RBAC is checked for them.
func (e *Env) Impersonate(user string, groups ...string) *rest.Config {
	c := rest.CopyConfig(e.Config)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return c
}

// ServiceAccountUser is the user name of a ServiceAccount, for Impersonate.
func ServiceAccountUser(namespace, name string) (string, []string) {
	return "system:serviceaccount:" + namespace + ":" + name,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// PID is the process ID of a running component (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kwok), or 0, to read its CPU
// time.
func (e *Env) PID(component string) int {
	for _, p := range e.procs {
		if p.name == component && p.cmd.Process != nil {
			return p.cmd.Process.Pid
		}
	}
	return 0
}

// LogPath is the log file of a component (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kwok).
func (e *Env) LogPath(component string) string {
	return filepath.Join(e.Dir, "logs", component+".log")
}

func (e *Env) startControllers(ctx context.Context, bin, logDir string, c *pki) error {
	kcm, err := startProc("kube-controller-manager", filepath.Join(bin, "kube-controller-manager"), []string{
		"--kubeconfig=" + e.Kubeconfig,
		"--controllers=*,-nodeipam",
		"--service-account-private-key-file=" + c.SAKey,
		"--root-ca-file=" + c.CACert,
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--secure-port=0",
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--concurrent-job-syncs=20",
	}, logDir)
	if err != nil {
		return err
	}
	e.procs = append(e.procs, kcm)
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	// The service account controller creating "default" in "default" shows
	// the controller manager is up and its controllers are running.
	if err := waitFor(kcm, "kube-controller-manager", 60*time.Second, func() error {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	sched, err := startProc("kube-scheduler", filepath.Join(bin, "kube-scheduler"), []string{
		"--kubeconfig=" + e.Kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
	}, logDir)
	if err != nil {
		return err
	}
	e.procs = append(e.procs, sched)
	// The scheduler has no health endpoint with serving off; give it a moment
	// to fail on bad flags before declaring it started.
	time.Sleep(300 * time.Millisecond)
	if sched.Exited() {
		return sched.failure("kube-scheduler")
	}
	return nil
}

func (e *Env) startKwok(ctx context.Context, bin, logDir string, opts Options) error {
	stageDir := filepath.Join(bin, "kwok-stages")
	entries, err := os.ReadDir(stageDir)
	if err != nil {
		return fmt.Errorf("kwok stages: %w (run make testcluster)", err)
	}
	args := []string{
		"--kubeconfig=" + e.Kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector=" + kwokNodeLabel + "=kwok",
		"--cidr=10.1.0.0/16",
		"--node-ip=127.0.0.1",
		"--node-port=0",
	}
	for _, en := range entries {
		args = append(args, "--config="+filepath.Join(stageDir, en.Name()))
	}
	for i, s := range opts.Stages {
		p := filepath.Join(e.Dir, fmt.Sprintf("stage-%d.yaml", i))
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			return err
		}
		args = append(args, "--config="+p)
	}
	kwok, err := startProc("kwok", filepath.Join(bin, "kwok"), args, logDir)
	if err != nil {
		return err
	}
	e.procs = append(e.procs, kwok)
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	for i := 0; i < opts.GPUNodes; i++ {
		n := node(fmt.Sprintf("gpu-node-%d", i), opts.GPUsPerNode, SimulatedOS[i%len(SimulatedOS)])
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		e.Nodes = append(e.Nodes, n.Name)
	}
	for i := 0; i < opts.CPUNodes; i++ {
		n := node(fmt.Sprintf("cpu-node-%d", i), 0, SimulatedOS[i%len(SimulatedOS)])
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		e.Nodes = append(e.Nodes, n.Name)
	}
	return waitFor(kwok, "kwok nodes", 60*time.Second, func() error {
		for _, name := range e.Nodes {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !nodeReady(n) {
				return fmt.Errorf("node %s not ready", name)
			}
		}
		return nil
	})
}

// node builds a simulated node of os, with the labels NFD would give it;
// gpus > 0 makes it a GPU node with the labels, capacity and taint that a
// real GPU node carries.
func node(name string, gpus int, os NodeOS) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resourceQuantity("64"),
		corev1.ResourceMemory: resourceQuantity("512Gi"),
		corev1.ResourcePods:   resourceQuantity("250"),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{kwokNodeLabel: "kwok", corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		},
		Status: corev1.NodeStatus{
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "fake", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
	for k, v := range NFDLabels(os) {
		n.Labels[k] = v
	}
	if gpus > 0 {
		capacity[GPUResource] = resourceQuantity(itoa(gpus))
		n.Labels[GPUNodeLabel] = "true"
		n.Labels["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
		n.Spec.Taints = []corev1.Taint{{Key: string(GPUResource), Value: "present", Effect: corev1.TaintEffectNoSchedule}}
	}
	n.Status.Capacity = capacity
	n.Status.Allocatable = capacity.DeepCopy()
	return n
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// BinDir is where the control-plane binaries are: $TRAINOPS_CONTROLPLANE_DIR
// or bin/controlplane/current in the repository.
func BinDir() (string, error) {
	return builtDir("TRAINOPS_CONTROLPLANE_DIR", []string{"bin", "controlplane", "current"}, []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}, "control-plane binary")
}

// builtDir is a folder `make testcluster` builds: $env, else under the
// repository at rel; each of files must be in it (what names them in the
// error).
func builtDir(env string, rel, files []string, what string) (string, error) {
	dir := os.Getenv(env)
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(append([]string{root}, rel...)...)
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("%s %s not found in %s: run `make testcluster` (it builds them from source; several minutes the first time)", what, f, dir)
		}
	}
	return dir, nil
}

// RepoRoot finds the trainops repository root from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isProjectRoot(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the trainops repository (no go.mod of github.com/trainops/trainops above the working directory)")
		}
		dir = parent
	}
}

func isProjectRoot(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := strings.TrimSpace(s.Text()); strings.HasPrefix(line, "module ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "module ")) == "github.com/trainops/trainops"
		}
	}
	return false
}
