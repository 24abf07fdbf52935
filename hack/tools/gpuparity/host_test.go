// SPDX-License-Identifier: Apache-2.0

package gpuparity

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/trainops/trainops/internal/builder"
)

// TestHostAccessMatchesUpstream: each DaemonSet of the GPU stack shares
// the node's PID, IPC and network namespaces as the GPU Operator's does,
// and mounts every folder of the node the GPU Operator's mounts, unless
// Differences says why not.
func TestHostAccessMatchesUpstream(t *testing.T) {
	cp := clusterPolicy(t, "clusterpolicy-mig")
	for _, c := range []struct{ asset, daemonSet string }{
		{"state-driver/0500_daemonset.yaml", ubuntuDriver},
		{"state-container-toolkit/0500_daemonset.yaml", builder.ToolkitDaemonSet},
		{"state-operator-validation/0500_daemonset.yaml", builder.ValidatorDaemonSet},
		{"state-device-plugin/0500_daemonset.yaml", builder.DevicePluginDaemonSet},
		{"gpu-feature-discovery/0500_daemonset.yaml", builder.GFDDaemonSet},
		{"state-dcgm-exporter/0900_daemonset.yaml", builder.DCGMExporterDaemonSet},
		{"state-mig-manager/0600_daemonset.yaml", builder.MIGManagerDaemonSet},
	} {
		var up appsv1.DaemonSet
		asset(t, c.asset, &up)
		ours := built[*appsv1.DaemonSet](t, cp, c.daemonSet).Spec.Template.Spec
		us := up.Spec.Template.Spec
		for _, f := range []struct {
			name      string
			up, trops bool
		}{{"hostPID", us.HostPID, ours.HostPID}, {"hostIPC", us.HostIPC, ours.HostIPC}, {"hostNetwork", us.HostNetwork, ours.HostNetwork}} {
			if f.up != f.trops && !differs(fmt.Sprintf("%s: %s %v", up.Name, f.name, f.trops)) {
				t.Errorf("%s: %s %v, the GPU Operator's %v", c.daemonSet, f.name, f.trops, f.up)
			}
		}
		mounted := map[string]bool{}
		for _, v := range ours.Volumes {
			if v.HostPath != nil {
				mounted[v.HostPath.Path] = true
			}
		}
		for _, v := range us.Volumes {
			if v.HostPath != nil && !mounted[v.HostPath.Path] && !differs(up.Name+": hostPath "+v.HostPath.Path) {
				t.Errorf("%s: the GPU Operator's mounts the node's %s (volume %s); trainops's does not, and Differences does not say why", c.daemonSet, v.HostPath.Path, v.Name)
			}
		}
	}
}
