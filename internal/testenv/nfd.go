// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// nfdNamespace is where Node Feature Discovery's worker publishes the real
// node's NodeFeature.
const nfdNamespace = "default"

// RunNFD puts the labels GPU feature discovery wrote (GFDOutput) on the
// real node with Node Feature Discovery's own code (hack/tools/nfd, the
// release the GPU Operator's chart deploys): it installs NFD's CRDs and
// starts its master once, then runs its worker once with only its local
// source, which reads the features.d folder GFD writes to (this machine's
// own hardware is not a GPU node's). The worker publishes a NodeFeature;
// the master then labels the Node, a moment after RunNFD returns.
func (e *Env) RunNFD(ctx context.Context) error {
	if e.RealNode == "" {
		return fmt.Errorf("no real node")
	}
	bin, err := NodeBinDir()
	if err != nil {
		return err
	}
	dir := filepath.Join(bin, "nfd")
	logs := filepath.Join(e.Dir, "logs")
	// Neither serves metrics or health: pods on the node have no use for
	// them.
	args := []string{"-kubeconfig=" + e.Kubeconfig, "-metrics=0", "-grpc-health=0"}
	env := []string{"NODE_NAME=" + RealNodeName, "KUBERNETES_NAMESPACE=" + nfdNamespace}
	if e.nfdMaster == nil {
		if _, err := envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{Paths: []string{filepath.Join(dir, "nfd-api-crds.yaml")}, MaxTime: time.Minute}); err != nil {
			return fmt.Errorf("install Node Feature Discovery's CRDs: %w", err)
		}
		p, err := startProc("nfd-master", filepath.Join(dir, "nfd-master"), args, logs, env...)
		if err != nil {
			return err
		}
		e.nfdMaster = p
		e.procs = append(e.procs, p)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "nfd-worker"), append(args, "-oneshot", "-label-sources=local", "-no-owner-refs")...)
	cmd.Env = append(os.Environ(), env...)
	log, err := os.OpenFile(filepath.Join(logs, "nfd-worker.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nfd-worker: %w; last lines of %s:\n%s", err, log.Name(), tail(log.Name(), 15))
	}
	return nil
}
