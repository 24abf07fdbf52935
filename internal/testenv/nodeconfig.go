// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"fmt"
	"path/filepath"
	"strings"
)

// The real node's network, inside the network namespace the test made:
// a bridge with a private subnet whose gateway is the node's address,
// where the API server, CoreDNS and the kubelet listen for pods.
const (
	// NodeBridge is the bridge pods attach to.
	NodeBridge = "trainops0"
	// NodeIP is the bridge's address: the node's InternalIP, and where
	// pods reach the API server and CoreDNS.
	NodeIP = "10.244.0.1"
	// NodeSubnet is the pods' subnet on the bridge.
	NodeSubnet = "10.244.0.0/24"
	// ServiceSubnet is the API server's Service IP range.
	ServiceSubnet = "10.0.0.0/16"
	// RealNodeName is the real node's name.
	RealNodeName = "node-real"
)

// nodePaths are the real node's folders under the environment's folder.
type nodePaths struct {
	root, containerd, cniBin, cniConf, cniData, kubelet, logs string
}

func newNodePaths(dir string) nodePaths {
	root := filepath.Join(dir, "node")
	return nodePaths{
		root:       root,
		containerd: filepath.Join(root, "containerd"),
		cniBin:     filepath.Join(root, "cni", "bin"),
		cniConf:    filepath.Join(root, "cni", "net.d"),
		cniData:    filepath.Join(root, "cni", "data"),
		kubelet:    filepath.Join(root, "kubelet"),
		logs:       filepath.Join(root, "pod-logs"),
	}
}

// socket is containerd's CRI and API socket.
func (p nodePaths) socket() string { return filepath.Join(p.containerd, "containerd.sock") }

// containerdConfig is containerd 2's configuration (version 3): a root,
// state and socket of its own, CRI with the node's runc (bin) on cgroupfs,
// also as the nvidia handler the GPU stack's RuntimeClass names, which the
// container toolkit adds on a node with GPUs; the settings this kind of
// machine needs (no CAP_SYS_RESOURCE: restrict_oom_score_adj; no
// AppArmor); the pause image pinned, and registries from certs.d
// (hostsDir).
func containerdConfig(p nodePaths, bin, sandboxImage, hostsDir string) string {
	runc := filepath.Join(bin, "runc")
	return fmt.Sprintf(`version = 3
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  level = "info"
[metrics]
  address = ""
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %q
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = %q
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
        BinaryName = %q
        SystemdCgroup = false
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, filepath.Join(p.containerd, "root"), filepath.Join(p.containerd, "state"), p.socket(), p.socket()+".ttrpc",
		sandboxImage, hostsDir, p.cniBin, p.cniConf, runc, runc)
}

// cniConfig is the bridge network: pods on NodeBridge in NodeSubnet,
// the bridge their gateway, no masquerade (nothing leaves the namespace).
func cniConfig(p nodePaths) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "trainops",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, NodeBridge, p.cniData, NodeSubnet, NodeIP)
}

// kubeletConfig is the kubelet's configuration: cgroupfs under a cgroup
// root of this run's own, cgroup v1 allowed, x509 clients of the
// environment's CA authorised by the API server, CoreDNS on the bridge,
// and eviction thresholds low enough for a shared machine.
func kubeletConfig(p nodePaths, cgroupRoot, caFile, resolvConf string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %q
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: %q
cgroupsPerQOS: true
containerRuntimeEndpoint: %q
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %q
authorization:
  mode: Webhook
clusterDomain: cluster.local
clusterDNS: [%q]
resolvConf: %q
podLogsDirectory: %q
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
protectKernelDefaults: false
localStorageCapacityIsolation: true
maxPods: 110
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
fileCheckFrequency: 5s
shutdownGracePeriod: 0s
`, NodeIP, cgroupRoot, "unix://"+p.socket(), caFile, NodeIP, resolvConf, p.logs)
}

// kubeProxyConfig is kube-proxy in nftables mode for the node, leaving
// the machine-wide conntrack settings as they are.
func kubeProxyConfig(kubeconfig string, healthPort, metricsPort int) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: %q
clusterCIDR: %q
bindAddress: %q
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
clientConnection:
  kubeconfig: %q
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
nodePortAddresses: [%q]
`, RealNodeName, NodeSubnet, NodeIP, healthPort, metricsPort, kubeconfig, NodeIP+"/32")
}

// corefile answers for cluster.local from the API server, on the bridge.
func corefile(kubeconfig string, healthPort, readyPort int) string {
	return strings.TrimLeft(fmt.Sprintf(`
cluster.local:53 in-addr.arpa:53 {
    bind %s
    errors
    health 127.0.0.1:%d
    ready 127.0.0.1:%d
    kubernetes cluster.local in-addr.arpa {
        kubeconfig %s trainops-local
        pods insecure
        ttl 5
    }
}
`, NodeIP, healthPort, readyPort, kubeconfig), "\n")
}
