// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The real node runs, with the control plane it joins and everything that
// talks to pod addresses, inside a network and mount namespace the test
// binary makes for itself: it runs itself again under `unshare --net
// --mount`. Pod and bridge addresses exist only there, so no traffic to
// them leaves it; the host-wide folders the kubelet and containerd insist
// on are bind mounts of the environment's own folders there, gone with it.
// What the namespace cannot hold (cgroups, the kernel settings the kubelet
// writes, the processes' lives) the outer process puts back once the
// inner one ends, however it ended.

const (
	// nodeNSEnv marks the test binary running inside its namespace; its
	// value is the cgroup root the kubelet uses.
	nodeNSEnv = "TRAINOPS_NODE_NAMESPACE"
	// nodeLock serialises real nodes on one machine: the kernel settings
	// they write are machine-wide.
	nodeLock = "/run/trainops-node.lock"
)

// hostDirs are the machine-wide folders the kubelet, containerd's shims and
// the CNI plugins use whatever their settings say, the one the GPU stack's
// pods share (/run/nvidia: validations, the driver's root), the one the
// NVIDIA container toolkit installs itself into, where NVIDIA's CDI
// specs are written and read (/var/run/cdi), and Node Feature Discovery's
// features folder, where GPU feature discovery writes; inside the
// namespace each is a bind mount of a folder of the environment's.
var hostDirs = []string{"/run/containerd", "/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni", "/run/netns", gpuStackDir, ToolkitInstallDir, CDISpecDir, nfdFeaturesDir}

// CDISpecDir is where the device plugin and the toolkit write the CDI
// specs of the node's GPUs, and where containerd and the NVIDIA runtime
// read them (/var/run/cdi, /var/run a link to /run).
const CDISpecDir = "/run/cdi"

// ToolkitInstallDir is where the NVIDIA container toolkit installs its
// runtime on a node, and where the nvidia handler of containerd's
// configuration then points.
const ToolkitInstallDir = "/usr/local/nvidia"

// gpuStackDir is where the GPU stack's pods share validations and the
// driver's root.
const gpuStackDir = "/run/nvidia"

// kernelSettings are the machine-wide sysctls the kubelet sets; they are
// put back as they were.
var kernelSettings = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}

// NodeMissing says what this machine lacks to run a real node, or "" when
// it has everything: root, Linux, unshare, nft, ip, and the node's parts
// built by `make testcluster` (containerd, runc, the kubelet...).
func NodeMissing() string {
	if runtime.GOOS != "linux" {
		return "a real node needs Linux"
	}
	if os.Geteuid() != 0 {
		return "a real node needs root (it runs the kubelet, containerd and runc)"
	}
	var missing []string
	for _, b := range []string{"unshare", "nft", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return "a real node needs " + strings.Join(missing, ", ") + " (hack/node-packages.sh installs them from Debian's packages)"
	}
	if _, err := NodeBinDir(); err != nil {
		return err.Error()
	}
	if _, err := ImageDir(); err != nil {
		return err.Error()
	}
	return ""
}

// InNodeNamespace reports whether this process runs inside the namespace
// made for a real node.
func InNodeNamespace() bool { return os.Getenv(nodeNSEnv) != "" }

// RunInNodeNamespace runs this program again, with the same arguments,
// inside a new network and mount namespace (where InNodeNamespace is
// true) and returns its exit code, then ends every process left in that
// namespace and puts back the cgroups and kernel settings. testenv.Main
// uses it for test binaries; `make demo` and `make bench` for themselves.
func RunInNodeNamespace() (int, error) {
	unlock, err := lockNode()
	if err != nil {
		return 1, err
	}
	defer unlock()
	sweepStaleNodes()
	saved := saveKernelSettings()
	defer restoreKernelSettings(saved)
	created, err := makeMountPoints()
	defer removeMountPoints(created)
	if err != nil {
		return 1, err
	}
	cgroupRoot := fmt.Sprintf("trainops-node-%d", os.Getpid())
	if err := makeCgroupRoot(cgroupRoot); err != nil {
		return 1, err
	}
	defer removeCgroupRoot(cgroupRoot)
	self, err := os.Executable()
	if err != nil {
		return 1, err
	}
	cmd := exec.Command("unshare", append([]string{"--net", "--mount", "--propagation", "private", "--", self}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), nodeNSEnv+"=/"+cgroupRoot)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("run the tests in a namespace of their own: %w", err)
	}
	// unshare makes the namespace, then runs this binary in it: wait for
	// the first (or for the child's end, when it never gets that far).
	own, netns := namespaceOf(os.Getpid()), ""
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ns := namespaceOf(cmd.Process.Pid); ns != own {
			netns = ns
			break
		}
	}
	err = cmd.Wait()
	endNamespace(netns)
	killCgroup("/" + cgroupRoot)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), nil
	case err != nil:
		return 1, err
	}
	return 0, nil
}

// lockNode waits for, then holds, the machine's real-node lock.
func lockNode() (func(), error) {
	f, err := os.OpenFile(nodeLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", nodeLock, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

func saveKernelSettings() map[string]string {
	out := map[string]string{}
	for _, k := range kernelSettings {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			out[k] = strings.TrimSpace(string(b))
		}
	}
	return out
}

func restoreKernelSettings(saved map[string]string) {
	for k, v := range saved {
		_ = os.WriteFile("/proc/sys/"+k, []byte(v), 0o644)
	}
}

// makeMountPoints makes the host folders that are missing (the namespace
// mounts over them) and returns those it made.
func makeMountPoints() ([]string, error) {
	var created []string
	for _, d := range hostDirs {
		if _, err := os.Stat(d); err == nil {
			continue
		}
		// Record every parent made too, outermost last.
		for p := d; ; p = filepath.Dir(p) {
			if _, err := os.Stat(p); err == nil {
				break
			}
			created = append(created, p)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return created, err
		}
	}
	return created, nil
}

// removeMountPoints removes the folders makeMountPoints made, when empty.
func removeMountPoints(created []string) {
	for _, d := range created {
		_ = os.Remove(d)
	}
}

// cgroupControllers are the cgroup v1 hierarchies mounted on this machine
// (or the single v2 one).
func cgroupControllers() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range entries {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

// makeCgroupRoot makes the kubelet's cgroup root in every hierarchy.
func makeCgroupRoot(name string) error {
	for _, c := range cgroupControllers() {
		if err := os.Mkdir(filepath.Join(c, name), 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("make cgroup %s: %w", filepath.Join(c, name), err)
		}
	}
	return nil
}

// killCgroup kills every process in the cgroup root (the pods' containers,
// each in a network namespace of its own) until none is left.
func killCgroup(root string) {
	for range 100 {
		left := 0
		for _, c := range cgroupControllers() {
			_ = filepath.WalkDir(filepath.Join(c, root), func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil
				}
				b, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						left++
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				return nil
			})
		}
		if left == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sweepStaleNodes ends what a run killed before its clean-up left behind:
// the processes and cgroups of cgroup roots whose run is gone.
func sweepStaleNodes() {
	seen := map[string]bool{}
	for _, c := range cgroupControllers() {
		entries, _ := os.ReadDir(c)
		for _, e := range entries {
			pid, ok := strings.CutPrefix(e.Name(), "trainops-node-")
			if !ok || seen[e.Name()] {
				continue
			}
			if n, err := strconv.Atoi(pid); err != nil || syscall.Kill(n, 0) == nil {
				continue // not ours, or its run is alive
			}
			seen[e.Name()] = true
			killCgroup("/" + e.Name())
			removeCgroupRoot(e.Name())
		}
	}
}

// removeCgroupRoot removes the cgroup root and everything under it,
// deepest first (their processes have ended).
func removeCgroupRoot(name string) {
	for _, c := range cgroupControllers() {
		root := filepath.Join(c, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = syscall.Rmdir(dirs[i])
		}
	}
}

// namespaceOf is the network namespace of pid, as /proc shows it.
func namespaceOf(pid int) string {
	ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	return ns
}

// endNamespace kills every process in the network namespace netns until
// none is left (containerd's shims and the containers outlive the test
// binary otherwise).
func endNamespace(netns string) {
	if netns == "" || netns == namespaceOf(os.Getpid()) {
		return
	}
	killInNamespace(netns, 0)
}

// killInNamespace kills every process in the network namespace netns but
// spare, until none is left or for a while at most.
func killInNamespace(netns string, spare int) {
	for range 300 {
		left := 0
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == spare || namespaceOf(pid) != netns {
				continue
			}
			left++
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if left == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// endNode, inside the node's namespace, kills what the node left running
// (containerd's shims and their containers) and unmounts what containerd
// and the kubelet mounted under dir and the host folders bound there (the
// later mounts first), so dir can be removed.
func endNode(dir string) {
	killCgroup(os.Getenv(nodeNSEnv))
	killInNamespace(namespaceOf(os.Getpid()), os.Getpid())
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var mounts []string
	under := func(p string) bool {
		for _, d := range append([]string{dir}, hostDirs...) {
			if p == d || strings.HasPrefix(p, d+"/") {
				return true
			}
		}
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && under(f[4]) {
			mounts = append(mounts, f[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
}
