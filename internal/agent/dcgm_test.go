// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"strings"
	"testing"

	"github.com/trainops/trainops/internal/gpuhealth"
	"github.com/trainops/trainops/internal/gpuhealth/gpuhealthtest"
)

func TestDCGMSamples(t *testing.T) {
	th := DefaultThresholds()
	for _, tc := range []struct {
		file  string
		kinds []string
		want  []string
	}{
		{"healthy.prom", nil, nil},
		{"xid-error.prom", []string{GPUXidError}, []string{"GPU 1", "node gpu-node-1", "XID 79 (GPU has fallen off the bus)", "RESTART_BM", "GPU-00000001"}},
		{"hot.prom", []string{GPUMemory, GPUHot}, []string{"91°C", "node gpu-node-2", "79747 of 81247 MiB"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			gpus, err := gpuhealth.ParseDCGM(strings.NewReader(string(gpuhealthtest.Sample(t, tc.file))))
			if err != nil {
				t.Fatal(err)
			}
			if len(gpus) != 2 {
				t.Fatalf("%d GPUs, want 2", len(gpus))
			}
			fs := InspectGPUs(gpus, th)
			var kinds []string
			var msgs string
			for _, f := range fs {
				kinds = append(kinds, f.Kind)
				msgs += f.Message + "\n"
				if f.Object.Kind != "Node" || f.Object.Name == "" {
					t.Errorf("finding not about a node: %+v", f.Object)
				}
			}
			if strings.Join(kinds, ",") != strings.Join(tc.kinds, ",") {
				t.Fatalf("kinds %v, want %v:\n%s", kinds, tc.kinds, msgs)
			}
			for _, w := range tc.want {
				if !strings.Contains(msgs, w) {
					t.Errorf("messages lack %q:\n%s", w, msgs)
				}
			}
		})
	}
}
