// SPDX-License-Identifier: Apache-2.0

package builder_test

import (
	"path/filepath"
	"slices"
	"testing"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// TestAgentReadsTheActiveExporter: a GPU-watching agent is given the
// DCGM exporter Service of the active ClusterPolicy, in its namespace;
// none when no ClusterPolicy runs one, and none for an agent without
// gpuEnable.
func TestAgentReadsTheActiveExporter(t *testing.T) {
	var cp gpuv1alpha1.ClusterPolicy
	load(t, filepath.Join(seeds, "gpu-cluster-config.yaml"), &cp)
	cp.Spec.Namespace = "gpu-stack"
	if got, want := builder.DCGMExporterURL(&cp), "http://nvidia-dcgm-exporter.gpu-stack.svc:9400/metrics"; got != want {
		t.Errorf("exporter URL %q, want %q", got, want)
	}
	off := cp.DeepCopy()
	f := false
	off.Spec.DCGM.Exporter.Enabled = &f
	if got := builder.DCGMExporterURL(off); got != "" {
		t.Errorf("exporter URL %q with the exporter off", got)
	}
	if got := builder.DCGMExporterURL(nil); got != "" {
		t.Errorf("exporter URL %q without a ClusterPolicy", got)
	}
	var a aiopsv1alpha1.SREAgent
	load(t, filepath.Join(seeds, "gpu-monitor-agent.yaml"), &a)
	opts := builder.Options{AgentImage: "img", DCGMURL: builder.DCGMExporterURL(&cp)}
	args := builder.AgentDeployment(&a, opts).Spec.Template.Spec.Containers[0].Args
	if !a.Spec.GPUEnable || !slices.Contains(args, "--dcgm-url=http://nvidia-dcgm-exporter.gpu-stack.svc:9400/metrics") {
		t.Errorf("gpuEnable %v, args %v", a.Spec.GPUEnable, args)
	}
	a.Spec.GPUEnable = false
	if args := builder.AgentDeployment(&a, opts).Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--dcgm-url=") {
		t.Errorf("an agent without gpuEnable reads an exporter: %v", args)
	}
}
