// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"

	"github.com/trainops/trainops/internal/gpuhealth"
)

// InspectGPUs finds GPUs with XID errors, too hot, or nearly out of memory.
// An XID's message says what NVIDIA's catalog says of it (gpuhealth's
// table).
func InspectGPUs(gpus []gpuhealth.GPU, th Thresholds) []Finding {
	var out []Finding
	for _, g := range gpus {
		ref := Ref{APIVersion: "v1", Kind: "Node", Name: g.Node, UID: "gpu-" + g.GPU}
		where := fmt.Sprintf("GPU %s (%s, %s) on node %s", g.GPU, g.Model, g.UUID, g.Node)
		if g.XID != 0 {
			p := gpuhealth.Classify([]gpuhealth.GPU{{GPU: g.GPU, UUID: g.UUID, XID: g.XID}}, gpuhealth.Thresholds{})[0]
			out = append(out, Finding{Kind: GPUXidError, Object: ref,
				Message: fmt.Sprintf("%s (node %s, %s); check `nvidia-smi -q` and the kernel log on the node", p.Message, g.Node, g.Model)})
		}
		if g.TempC >= th.GPUTemperature {
			out = append(out, Finding{Kind: GPUHot, Object: ref,
				Message: fmt.Sprintf("%s is at %.0f°C (threshold %.0f°C): check cooling; the GPU will throttle", where, g.TempC, th.GPUTemperature)})
		}
		if total := g.FBUsed + g.FBFree; g.HasFB && total > 0 && g.FBUsed/total >= th.GPUMemory {
			out = append(out, Finding{Kind: GPUMemory, Object: ref,
				Message: fmt.Sprintf("%s uses %.0f of %.0f MiB of memory (%.0f%%): a job may fail with out-of-memory", where, g.FBUsed, total, 100*g.FBUsed/total)})
		}
	}
	sortFindings(out)
	return out
}
