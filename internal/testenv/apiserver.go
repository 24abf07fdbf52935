// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// startEtcd starts etcd on free ports of 127.0.0.1 and returns its URL.
func (e *Env) startEtcd(bin, logDir string) (string, error) {
	for attempt := 0; ; attempt++ {
		client, err := freePort()
		if err != nil {
			return "", err
		}
		peer, err := freePort()
		if err != nil {
			return "", err
		}
		url := "http://127.0.0.1:" + itoa(client)
		peerURL := "http://127.0.0.1:" + itoa(peer)
		dataDir := filepath.Join(e.Dir, "etcd")
		_ = os.RemoveAll(dataDir)
		p, err := startProc("etcd", filepath.Join(bin, "etcd"), []string{
			"--name=default",
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + url,
			"--advertise-client-urls=" + url,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=default=" + peerURL,
			"--listen-metrics-urls=http://127.0.0.1:0",
			"--unsafe-no-fsync=true",
			"--quota-backend-bytes=8589934592",
			"--log-level=warn",
		}, logDir)
		if err != nil {
			return "", err
		}
		err = waitFor(p, "etcd", 30*time.Second, func() error { return httpOK(url + "/health") })
		if err != nil && p.Exited() && addrInUse(p) && attempt < 3 {
			continue
		}
		if err != nil {
			p.Stop(time.Second)
			return "", err
		}
		e.procs = append(e.procs, p)
		e.etcd = &restartable{proc: p, bin: filepath.Join(bin, "etcd"), dir: logDir, args: p.cmd.Args[1:],
			readiness: func(p *Process) error {
				return waitFor(p, "etcd", 30*time.Second, func() error { return httpOK(url + "/health") })
			}}
		return url, nil
	}
}

// startAPIServer starts kube-apiserver on a free port against etcdURL,
// with the certificates of c (see apiServerArgs for a real node's flags),
// and writes the admin kubeconfig.
func (e *Env) startAPIServer(ctx context.Context, bin, logDir, etcdURL string, c *pki, realNode bool) error {
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		server := "https://127.0.0.1:" + itoa(port)
		p, err := startProc("kube-apiserver", filepath.Join(bin, "kube-apiserver"), append(apiServerArgs(realNode, c), []string{
			"--etcd-servers=" + etcdURL,
			"--secure-port=" + itoa(port),
			"--tls-cert-file=" + c.ServingCert,
			"--tls-private-key-file=" + c.ServingKey,
			"--client-ca-file=" + c.CACert,
			"--service-account-key-file=" + c.SAPub,
			"--service-account-signing-key-file=" + c.SAKey,
			"--service-account-issuer=" + server,
			"--service-cluster-ip-range=" + ServiceSubnet,
			"--authorization-mode=RBAC",
			"--allow-privileged=true",
			"--cert-dir=" + filepath.Join(e.Dir, "pki"),
			// The aggregation layer, for extension API servers such as
			// Kueue's visibility API.
			"--requestheader-client-ca-file=" + c.FrontProxyCA,
			"--requestheader-allowed-names=" + proxyClientName,
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--proxy-client-cert-file=" + c.ProxyClientCert,
			"--proxy-client-key-file=" + c.ProxyClientKey,
		}...), logDir)
		if err != nil {
			return err
		}
		e.Config = &rest.Config{
			Host:            server,
			TLSClientConfig: rest.TLSClientConfig{CAFile: c.CACert, CertFile: c.AdminCert, KeyFile: c.AdminKey},
			QPS:             -1, // API Priority and Fairness is on: no client-side throttling
		}
		cs, err := kubernetes.NewForConfig(e.Config)
		if err != nil {
			return err
		}
		err = waitFor(p, "kube-apiserver", 90*time.Second, func() error {
			_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		})
		if err != nil && p.Exited() && addrInUse(p) && attempt < 3 {
			continue
		}
		if err != nil {
			p.Stop(time.Second)
			return err
		}
		e.procs = append(e.procs, p)
		e.apiserver = &restartable{proc: p, bin: filepath.Join(bin, "kube-apiserver"), dir: logDir, args: p.cmd.Args[1:],
			readiness: func(p *Process) error {
				return waitFor(p, "kube-apiserver", 90*time.Second, func() error {
					_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
					return err
				})
			}}
		e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
		return writeKubeconfig(e.Kubeconfig, server, c)
	}
}

// apiServerArgs are the API server's flags that differ with a real node.
// Without one it listens on 127.0.0.1 alone, maintains no endpoint for the
// kubernetes Service (nothing could reach it) and gives pods no tokens
// (kwok runs no container). With one, inside the node's namespace, it
// also listens on the bridge, where pods reach it through the kubernetes
// Service, gives pods their ServiceAccount tokens and reaches the kubelet
// with the admin's certificate.
func apiServerArgs(realNode bool, c *pki) []string {
	if !realNode {
		return []string{
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--endpoint-reconciler-type=none",
			"--disable-admission-plugins=ServiceAccount",
		}
	}
	return []string{
		"--bind-address=0.0.0.0", // inside the node's own network namespace
		"--advertise-address=" + NodeIP,
		"--kubelet-client-certificate=" + c.AdminCert,
		"--kubelet-client-key=" + c.AdminKey,
		"--kubelet-preferred-address-types=InternalIP",
	}
}

// writeKubeconfig writes a kubeconfig for the admin at path.
func writeKubeconfig(path, server string, c *pki) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["trainops-local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: c.CACert}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: c.AdminCert, ClientKey: c.AdminKey}
	cfg.Contexts["trainops-local"] = &clientcmdapi.Context{Cluster: "trainops-local", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "trainops-local"
	return clientcmd.WriteToFile(*cfg, path)
}
