// SPDX-License-Identifier: Apache-2.0

package builder_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// fullStack is the seed's ClusterPolicy with every component on (MIG
// instead of time-slicing: the two exclude each other).
func fullStack(t *testing.T) *gpuv1alpha1.ClusterPolicy {
	var cp gpuv1alpha1.ClusterPolicy
	load(t, filepath.Join(seeds, "gpu-cluster-config.yaml"), &cp)
	cp.Spec.MIGManager.Enabled = true
	cp.Spec.DevicePlugin.Config = nil
	return &cp
}

// TestPreinstalledDriverIsValidatedOnTheHost: with driver.enabled false
// there is no driver DaemonSet, and the toolkit, as the GPU Operator's,
// still validates the driver first, on the host's root, and starts on
// the driver root that validation found.
func TestPreinstalledDriverIsValidatedOnTheHost(t *testing.T) {
	cp := fullStack(t)
	off := false
	cp.Spec.Driver.Enabled = &off
	for _, o := range builder.ForClusterPolicy(cp, builder.OfflineGPUNodes).Objects {
		ds, ok := o.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		if strings.HasPrefix(ds.Name, builder.DriverDaemonSet) {
			t.Fatalf("driver DaemonSet %s built while disabled", ds.Name)
		}
		if ds.Name != builder.ToolkitDaemonSet {
			continue
		}
		ps := ds.Spec.Template.Spec
		if len(ps.InitContainers) != 1 || ps.InitContainers[0].Name != "driver-validation" || !mountsHostAt(ps, ps.InitContainers[0], "/", "/host") {
			t.Errorf("toolkit init containers %v, want the driver's validation, which sees the host's root", ps.InitContainers)
		}
		if args := strings.Join(ps.Containers[0].Args, " "); !strings.Contains(args, ". "+builder.DriverReadyFile) {
			t.Errorf("the toolkit starts without the driver root the validation found: %s", args)
		}
		return
	}
	t.Fatal("no toolkit DaemonSet")
}

// mountsHostAt reports whether ctr mounts hostDir of the host at path.
func mountsHostAt(ps corev1.PodSpec, ctr corev1.Container, hostDir, path string) bool {
	for _, vm := range ctr.VolumeMounts {
		for _, v := range ps.Volumes {
			if v.Name == vm.Name && v.HostPath != nil && v.HostPath.Path == hostDir && vm.MountPath == path {
				return true
			}
		}
	}
	return false
}

// TestRuntimePaths: CRI-O and a relocated containerd (k3s) get their own
// config and socket folders mounted where the toolkit looks.
func TestRuntimePaths(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		rt                     gpuv1alpha1.ContainerRuntimeSpec
		wantEnv                map[string]string
		wantHostDirs, notHosts []string
	}{
		{"crio", gpuv1alpha1.ContainerRuntimeSpec{Runtime: "crio"},
			map[string]string{"RUNTIME": "crio", "CRIO_CONFIG": "/runtime/config-dir/99-nvidia.conf", "CONTAINERD_SOCKET": ""}, []string{"/etc/crio/crio.conf.d"}, []string{"/run/containerd"}},
		{"k3s", gpuv1alpha1.ContainerRuntimeSpec{Runtime: "containerd", ConfigPath: "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl", SocketPath: "/run/k3s/containerd/containerd.sock"},
			map[string]string{"CONTAINERD_CONFIG": "/runtime/config-dir/config.toml.tmpl", "CONTAINERD_SOCKET": "/runtime/sock-dir/containerd.sock"},
			[]string{"/var/lib/rancher/k3s/agent/etc/containerd", "/run/k3s/containerd"}, []string{"/etc/containerd", "/run/containerd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := fullStack(t)
			tc.rt.Image, tc.rt.Enabled = cp.Spec.ContainerRuntime.Image, cp.Spec.ContainerRuntime.Enabled
			cp.Spec.ContainerRuntime = tc.rt
			for _, o := range builder.ForClusterPolicy(cp, builder.OfflineGPUNodes).Objects {
				ds, ok := o.(*appsv1.DaemonSet)
				if !ok || ds.Name != builder.ToolkitDaemonSet {
					continue
				}
				env := map[string]string{}
				for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
					env[e.Name] = e.Value
				}
				for k, v := range tc.wantEnv {
					if env[k] != v {
						t.Errorf("env %s=%q, want %q", k, env[k], v)
					}
				}
				hosts := map[string]bool{}
				for _, v := range ds.Spec.Template.Spec.Volumes {
					if v.HostPath != nil {
						hosts[v.HostPath.Path] = true
					}
				}
				for _, h := range tc.wantHostDirs {
					if !hosts[h] {
						t.Errorf("no hostPath %s", h)
					}
				}
				for _, h := range tc.notHosts {
					if hosts[h] {
						t.Errorf("hostPath %s mounted", h)
					}
				}
				return
			}
			t.Fatal("no toolkit DaemonSet")
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// daemonSetOf finds the DaemonSet name among c's objects.
func daemonSetOf(t *testing.T, c builder.ClusterPolicyChildren, name string) *appsv1.DaemonSet {
	t.Helper()
	for _, o := range c.Objects {
		if ds, ok := o.(*appsv1.DaemonSet); ok && ds.Name == name {
			return ds
		}
	}
	t.Fatalf("no DaemonSet %s", name)
	return nil
}
