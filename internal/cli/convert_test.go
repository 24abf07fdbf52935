// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

var originalSeeds = filepath.Join("..", "..", "testdata", "seeds", "original")

// TestConvertSeedsThenValidateAndExpand converts the seed operators'
// resources as their articles give them, in place, and holds the result
// against validate and render --expand: it must be a valid repository
// whose PyJobs become Jobs and whose ClusterPolicy becomes the GPU stack.
func TestConvertSeedsThenValidateAndExpand(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"bert-training.yaml", "distributed-training.yaml", "gpu-monitor-agent.yaml", "cluster-policy.yaml"} {
		b, err := os.ReadFile(filepath.Join(originalSeeds, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Before: refused, with the apiVersion to use and the command.
	_, errOut, code := run(t, "validate", dir)
	if code != ExitChanges || !strings.Contains(errOut, "training.trainops.dev/v1alpha1") || !strings.Contains(errOut, "trainops convert") {
		t.Fatalf("seed kinds before convert: exit %d\n%s", code, errOut)
	}

	out, errOut, code := run(t, "convert", "-w", "--namespace", "ml-team", dir)
	if code != ExitOK || out != "" {
		t.Fatalf("convert -w: exit %d, stdout %q\n%s", code, out, errOut)
	}
	mustContain(t, "convert's notes", errOut,
		"bert-training.yaml: PyJob bert-training: mapped apiVersion training.example.com/v1 → training.trainops.dev/v1alpha1",
		"bert-training.yaml: PyJob bert-training: defaulted metadata.namespace → ml-team: from --namespace",
		"bert-training.yaml: PyJob bert-training: mapped spec.gpu",
		"distributed-training.yaml: PyJob distributed-training: warning spec.datasetPath",
		"distributed-training.yaml: PyJob distributed-training: warning spec.outputPath",
		"gpu-monitor-agent.yaml: SREAgent gpu-monitor-agent: mapped spec.autoRepair",
		"cluster-policy.yaml: ClusterPolicy gpu-cluster-config: mapped spec.driver.version",
		"cluster-policy.yaml: ClusterPolicy gpu-cluster-config: mapped spec.dcgm.exporter.serviceMonitor.interval",
	)
	policy, err := os.ReadFile(filepath.Join(dir, "cluster-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The ClusterPolicy is already in trainops's form: only its apiVersion
	// changes, and its comments stay.
	mustContain(t, "converted ClusterPolicy", string(policy), "apiVersion: gpu.trainops.dev/v1alpha1", "# 驱动部署配置", "# DCGM监控开启", "replicas: 4")

	out, errOut, code = run(t, "validate", dir)
	if code != ExitOK {
		t.Fatalf("validate after convert: exit %d\n%s%s", code, out, errOut)
	}
	// Valid, but the distributed example's folders have no storage: said.
	mustContain(t, "validate's warnings", errOut,
		"warning: distributed-training.yaml: PyJob ml-team/distributed-training: spec.datasetPath: no spec.storage.dataset",
		"warning: distributed-training.yaml: PyJob ml-team/distributed-training: spec.outputPath: no spec.storage.output",
	)
	if strings.Contains(errOut, "bert-training") {
		t.Errorf("a warning for a PyJob without paths:\n%s", errOut)
	}
	out, errOut, code = run(t, "render", "--expand", dir)
	if code != ExitOK {
		t.Fatalf("render --expand after convert: exit %d\n%s", code, errOut)
	}
	mustContain(t, "expansion", out, "name: bert-training-job", "name: distributed-training-job", "name: "+builder.DevicePluginDaemonSet, "name: "+builder.DriverDaemonSet)

	// Converting again changes nothing.
	before, _ := os.ReadFile(filepath.Join(dir, "bert-training.yaml"))
	if _, errOut, code := run(t, "convert", "-w", dir); code != ExitOK || errOut != "" {
		t.Fatalf("second convert: exit %d\n%s", code, errOut)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "bert-training.yaml")); string(after) != string(before) {
		t.Fatalf("a converted file changed again:\n%s\n%s", before, after)
	}
}

// TestConvertWithoutNamespaceSaysWhatToDo: a PyJob with no namespace and
// no kustomization to give one is reported, not guessed.
func TestConvertWithoutNamespaceSaysWhatToDo(t *testing.T) {
	out, errOut, code := run(t, "convert", filepath.Join(originalSeeds, "bert-training.yaml"))
	if code != ExitOK || !strings.Contains(out, "apiVersion: training.trainops.dev/v1alpha1") || !strings.Contains(out, "# Scenario 1") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if !strings.Contains(errOut, "not mapped metadata.namespace: none given: pass --namespace, or set namespace: in the kustomization") {
		t.Fatalf("notes:\n%s", errOut)
	}
	// With a kustomization beside it that sets the namespace, none is needed.
	dir := t.TempDir()
	b, _ := os.ReadFile(filepath.Join(originalSeeds, "bert-training.yaml"))
	_ = os.WriteFile(filepath.Join(dir, "job.yaml"), b, 0o644)
	_ = os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("namespace: team-a\nresources:\n- job.yaml\n"), 0o644)
	out, errOut, code = run(t, "convert", filepath.Join(dir, "job.yaml"))
	if code != ExitOK || strings.Contains(out, "namespace: team-a") || !strings.Contains(errOut, "set by the kustomization's namespace: team-a") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestConvertGPUOperatorValues maps a GPU Operator values.yaml, with the
// keys a cluster running it sets, into a ClusterPolicy that validates.
func TestConvertGPUOperatorValues(t *testing.T) {
	out, errOut, code := run(t, "convert", "--from-helm-values", filepath.Join(originalSeeds, "gpu-operator-values.yaml"), "--name", "gpu")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var cp gpuv1alpha1.ClusterPolicy
	if err := yaml.UnmarshalStrict([]byte(out), &cp); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := cp.Spec
	checks := map[string][2]any{
		"driver.repository":            {s.Driver.Repository, "nvcr.io/nvidia"},
		"driver.image":                 {s.Driver.Image, "driver"},
		"driver.version":               {s.Driver.Version, "550.127.08"},
		"driver.upgradePolicy":         {s.Driver.UpgradePolicy.AutoUpgrade, true},
		"driver.maxUnavailable":        {s.Driver.UpgradePolicy.MaxUnavailable.String(), "25%"},
		"containerRuntime.image":       {s.ContainerRuntime.Image, "nvcr.io/nvidia/k8s/container-toolkit:v1.17.0-ubuntu20.04"},
		"containerRuntime.runtime":     {s.ContainerRuntime.Runtime, "containerd"},
		"containerRuntime.configPath":  {s.ContainerRuntime.ConfigPath, "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"},
		"containerRuntime.socketPath":  {s.ContainerRuntime.SocketPath, "/run/k3s/containerd/containerd.sock"},
		"containerRuntime.cdi":         {s.ContainerRuntime.CDI.Enabled, true},
		"devicePlugin.image":           {s.DevicePlugin.Image, "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"},
		"devicePlugin.replicas":        {s.DevicePlugin.Config.Sharing.TimeSlicing.Resources[0].Replicas, int32(4)},
		"devicePlugin.perNode":         {s.DevicePlugin.Config.PerNode[0].Name + "=" + s.DevicePlugin.Config.PerNode[0].Sharing.TimeSlicing.Resources[0].Name, "a100=nvidia.com/gpu"},
		"dcgm.serviceMonitor.enabled":  {*s.DCGM.Exporter.ServiceMonitor.Enabled, true},
		"dcgm.serviceMonitor.interval": {s.DCGM.Exporter.ServiceMonitor.Interval, "15s"},
		"dcgm.exporter.image":          {s.DCGM.Exporter.Image, "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"},
		"migManager.enabled":           {s.MIGManager.Enabled, false},
		"migManager.strategy":          {s.MIGManager.Strategy, "single"},
		"priorityClassName":            {s.PriorityClassName, "system-node-critical"},
		"tolerations":                  {s.Tolerations[0].Key, "nvidia.com/gpu"},
		"nodeSelector":                 {s.NodeSelector["gpu"], "true"},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s: %v, want %v", name, c[0], c[1])
		}
	}
	if r := s.DevicePlugin.Config.PerNode[0].Sharing.TimeSlicing.Resources[0].Replicas; r != 8 {
		t.Errorf("a100 replicas %d", r)
	}
	mustContain(t, "notes", errOut,
		"not mapped spec.driver.upgradePolicy.maxParallelUpgrades",
		"not mapped spec.driver.upgradePolicy.drain.enable",
		"not mapped spec.dcgmExporter.serviceMonitor.additionalLabels.release",
		"not mapped spec.migManager.config.name",
		"not mapped spec.node-feature-discovery.enableNodeFeatureApi: trainops does not deploy Node Feature Discovery",
		"mapped spec.toolkit.env[0] (CONTAINERD_CONFIG) → spec.containerRuntime.configPath",
	)
	// The ClusterPolicy it prints validates.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := run(t, "validate", dir); code != ExitOK {
		t.Fatalf("validate: exit %d\n%s%s", code, out, errOut)
	}
	// ... and expands into a stack that uses what the values said: RKE2's
	// containerd configuration, the a100 nodes' own device plugin.
	out, errOut, code = run(t, "render", "--expand", dir)
	if code != ExitOK {
		t.Fatalf("render --expand: exit %d\n%s", code, errOut)
	}
	mustContain(t, "expansion", out, "name: "+builder.ToolkitDaemonSet, "path: /var/lib/rancher/rke2/agent/etc/containerd", "nvidia.com/device-plugin.config: a100", "image: nvcr.io/nvidia/k8s-device-plugin:v0.17.0")
}

// TestConvertGoesOnPastABadFile: a file that is not YAML is reported by
// name, the others are still converted, and the exit status says so.
func TestConvertGoesOnPastABadFile(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(originalSeeds, "gpu-monitor-agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(dir, "agent.yaml"), b, 0o644)
	_ = os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("a: [unclosed\n"), 0o644)
	_, errOut, code := run(t, "convert", "-w", "-n", "ops", dir)
	if code != ExitUsage || !strings.Contains(errOut, "broken.yaml") || !strings.Contains(errOut, "1 of 2 files could not be converted") {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "broken.yaml")); string(b) != "a: [unclosed\n" {
		t.Errorf("the bad file was written: %q", b)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "agent.yaml"))
	if !strings.Contains(string(got), "apiVersion: aiops.trainops.dev/v1alpha1") || !strings.Contains(string(got), "namespace: ops") {
		t.Fatalf("the good file was not converted:\n%s", got)
	}
}
