package builder_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// referenceFacts is testdata/gpu-operator/<release>.yaml: what the NVIDIA
// GPU Operator gives each component on a host.
type referenceFacts struct {
	Release           string `json:"release"`
	PriorityClassName string `json:"priorityClassName"`
	Toleration        corev1.Toleration
	Components        []struct {
		DaemonSet        string            `json:"daemonSet"`
		DeployLabel      string            `json:"deployLabel"`
		ServiceAccount   string            `json:"serviceAccount"`
		HostPID          bool              `json:"hostPID"`
		Container        string            `json:"container"`
		RuntimeClassName string            `json:"runtimeClassName"`
		Env              []string          `json:"env"`
		EnvValues        map[string]string `json:"envValues"`
		HostPaths        []struct {
			Host        string `json:"host"`
			Path        string `json:"path"`
			Propagation string `json:"propagation"`
			ReadOnly    bool   `json:"readOnly"`
		} `json:"hostPaths"`
		WaitsFor       []string `json:"waitsFor"`
		Validates      []string `json:"validates"`
		UpdateStrategy string   `json:"updateStrategy"`
	} `json:"components"`
}

func loadFacts(t *testing.T) referenceFacts {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "gpu-operator", builder.GPUOperatorRelease+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f referenceFacts
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatal(err)
	}
	if f.Release != builder.GPUOperatorRelease || len(f.Components) == 0 {
		t.Fatalf("facts of release %q, %d components; want %s", f.Release, len(f.Components), builder.GPUOperatorRelease)
	}
	return f
}

// fullStack is the seed's ClusterPolicy with every component on (MIG
// instead of time-slicing: the two exclude each other).
func fullStack(t *testing.T) *gpuv1alpha1.ClusterPolicy {
	var cp gpuv1alpha1.ClusterPolicy
	load(t, filepath.Join(seeds, "gpu-cluster-config.yaml"), &cp)
	cp.Spec.MIGManager.Enabled = true
	cp.Spec.DevicePlugin.Config = nil
	return &cp
}

// TestReferenceFacts holds every DaemonSet of the GPU stack to what the
// GPU Operator release named in builder.GPUOperatorRelease gives the same
// component: node label, service account, priority, toleration, host PID,
// privilege, environment, every host path with its mount propagation, and
// the start order (which files an init container waits for, which
// components it validates).
func TestReferenceFacts(t *testing.T) {
	facts := loadFacts(t)
	built := map[string]*appsv1.DaemonSet{}
	for _, o := range builder.ForClusterPolicy(fullStack(t)).Objects {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			built[ds.Name] = ds
		}
	}
	for _, c := range facts.Components {
		t.Run(c.DaemonSet, func(t *testing.T) {
			ds := built[c.DaemonSet]
			if ds == nil {
				t.Fatalf("no DaemonSet %s (built: %v)", c.DaemonSet, keys(built))
			}
			ps := ds.Spec.Template.Spec
			if ps.NodeSelector[c.DeployLabel] != "true" {
				t.Errorf("nodeSelector %v lacks %s=true", ps.NodeSelector, c.DeployLabel)
			}
			if ps.ServiceAccountName != c.ServiceAccount || ps.PriorityClassName != facts.PriorityClassName || ps.HostPID != c.HostPID {
				t.Errorf("serviceAccount %q priorityClass %q hostPID %v; want %q %q %v", ps.ServiceAccountName, ps.PriorityClassName, ps.HostPID, c.ServiceAccount, facts.PriorityClassName, c.HostPID)
			}
			if got := ptrString(ps.RuntimeClassName); got != c.RuntimeClassName {
				t.Errorf("runtimeClassName %q, want %q", got, c.RuntimeClassName)
			}
			if !slices.ContainsFunc(ps.Tolerations, func(tol corev1.Toleration) bool {
				return tol.Key == facts.Toleration.Key && tol.Operator == facts.Toleration.Operator && tol.Effect == facts.Toleration.Effect
			}) {
				t.Errorf("tolerations %v lack %v", ps.Tolerations, facts.Toleration)
			}
			if c.UpdateStrategy != "" && string(ds.Spec.UpdateStrategy.Type) != c.UpdateStrategy {
				t.Errorf("update strategy %s, want %s", ds.Spec.UpdateStrategy.Type, c.UpdateStrategy)
			}
			i := slices.IndexFunc(ps.Containers, func(ct corev1.Container) bool { return ct.Name == c.Container })
			if i < 0 {
				t.Fatalf("no container %s", c.Container)
			}
			ctr := ps.Containers[i]
			if sc := ctr.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
				t.Errorf("container %s is not privileged", ctr.Name)
			}
			env := map[string]string{}
			for _, e := range ctr.Env {
				env[e.Name] = e.Value
			}
			for _, name := range c.Env {
				if _, ok := env[name]; !ok {
					t.Errorf("env lacks %s", name)
				}
			}
			for name, want := range c.EnvValues {
				if env[name] != want {
					t.Errorf("env %s=%q, want %q", name, env[name], want)
				}
			}
			for _, hp := range c.HostPaths {
				vol := slices.IndexFunc(ps.Volumes, func(v corev1.Volume) bool { return v.HostPath != nil && v.HostPath.Path == hp.Host })
				if vol < 0 {
					t.Errorf("no hostPath volume for %s", hp.Host)
					continue
				}
				m := slices.IndexFunc(ctr.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.Name == ps.Volumes[vol].Name })
				if m < 0 {
					t.Errorf("host path %s is not mounted in %s", hp.Host, ctr.Name)
					continue
				}
				vm := ctr.VolumeMounts[m]
				prop := ""
				if vm.MountPropagation != nil {
					prop = string(*vm.MountPropagation)
				}
				if vm.MountPath != hp.Path || prop != hp.Propagation || vm.ReadOnly != hp.ReadOnly {
					t.Errorf("host path %s mounted at %s (propagation %q, read-only %v); want %s (%q, %v)", hp.Host, vm.MountPath, prop, vm.ReadOnly, hp.Path, hp.Propagation, hp.ReadOnly)
				}
			}
			for _, file := range c.WaitsFor {
				if !slices.ContainsFunc(ps.InitContainers, func(ic corev1.Container) bool {
					return strings.Contains(strings.Join(ic.Args, " "), "until [ -f "+file+" ]") && mountsHost(ps, ic, filepath.Dir(file))
				}) {
					t.Errorf("no init container waits for %s on the host", file)
				}
			}
			for _, comp := range c.Validates {
				if !slices.ContainsFunc(ps.InitContainers, func(ic corev1.Container) bool {
					return slices.Contains(ic.Args, "nvidia-validator") && slices.Contains(ic.Env, corev1.EnvVar{Name: "COMPONENT", Value: comp}) && mountsHost(ps, ic, builder.ValidationsDir)
				}) {
					t.Errorf("no init container validates %s", comp)
				}
			}
			if len(c.WaitsFor) == 0 && len(c.Validates) == 0 && len(ps.InitContainers) != 0 {
				t.Errorf("init containers %d, want none", len(ps.InitContainers))
			}
		})
	}
	if len(built) != len(facts.Components) {
		t.Errorf("built %d DaemonSets %v, the facts name %d", len(built), keys(built), len(facts.Components))
	}
}

// mountsHost reports whether ctr mounts hostDir of the host at the same
// path.
func mountsHost(ps corev1.PodSpec, ctr corev1.Container, hostDir string) bool {
	for _, vm := range ctr.VolumeMounts {
		for _, v := range ps.Volumes {
			if v.Name == vm.Name && v.HostPath != nil && v.HostPath.Path == hostDir && vm.MountPath == hostDir {
				return true
			}
		}
	}
	return false
}

// TestPreinstalledDriverSkipsTheWait: with driver.enabled false the
// toolkit starts at once, on the host's driver root, and nothing waits
// for a driver container.
func TestPreinstalledDriverSkipsTheWait(t *testing.T) {
	cp := fullStack(t)
	off := false
	cp.Spec.Driver.Enabled = &off
	for _, o := range builder.ForClusterPolicy(cp).Objects {
		ds, ok := o.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		if ds.Name == builder.DriverDaemonSet {
			t.Fatal("driver DaemonSet built while disabled")
		}
		if ds.Name != builder.ToolkitDaemonSet {
			continue
		}
		ps := ds.Spec.Template.Spec
		if len(ps.InitContainers) != 0 {
			t.Errorf("toolkit init containers %v, want none", ps.InitContainers)
		}
		env := map[string]string{}
		for _, e := range ps.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if env["NVIDIA_DRIVER_ROOT"] != "/" || env["DRIVER_ROOT_CTR_PATH"] != "/host" {
			t.Errorf("toolkit driver root %q in %q, want / in /host", env["NVIDIA_DRIVER_ROOT"], env["DRIVER_ROOT_CTR_PATH"])
		}
		return
	}
	t.Fatal("no toolkit DaemonSet")
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
			map[string]string{"RUNTIME": "crio", "CRIO_CONFIG": "/runtime/config-dir/crio.conf", "CONTAINERD_SOCKET": ""}, []string{"/etc/crio"}, []string{"/run/containerd"}},
		{"k3s", gpuv1alpha1.ContainerRuntimeSpec{Runtime: "containerd", ConfigPath: "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl", SocketPath: "/run/k3s/containerd/containerd.sock"},
			map[string]string{"CONTAINERD_CONFIG": "/runtime/config-dir/config.toml.tmpl", "CONTAINERD_SOCKET": "/runtime/sock-dir/containerd.sock"},
			[]string{"/var/lib/rancher/k3s/agent/etc/containerd", "/run/k3s/containerd"}, []string{"/etc/containerd", "/run/containerd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := fullStack(t)
			tc.rt.Image, tc.rt.Enabled = cp.Spec.ContainerRuntime.Image, cp.Spec.ContainerRuntime.Enabled
			cp.Spec.ContainerRuntime = tc.rt
			for _, o := range builder.ForClusterPolicy(cp).Objects {
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
