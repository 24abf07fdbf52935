// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// DCGM exporter metric names the agent reads.
const (
	metricXID     = "DCGM_FI_DEV_XID_ERRORS"
	metricTemp    = "DCGM_FI_DEV_GPU_TEMP"
	metricFBUsed  = "DCGM_FI_DEV_FB_USED"
	metricFBFree  = "DCGM_FI_DEV_FB_FREE"
	maxScrapeBody = 16 << 20
)

// GPU is one GPU as the DCGM exporter reports it.
type GPU struct {
	Node   string
	GPU    string
	UUID   string
	Model  string
	XID    float64
	TempC  float64
	FBUsed float64 // MiB
	FBFree float64 // MiB
	hasFB  bool
}

// ParseDCGM reads the exporter's Prometheus text output.
func ParseDCGM(r io.Reader) ([]GPU, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse DCGM metrics: %w", err)
	}
	gpus := map[string]*GPU{}
	get := func(m *dto.Metric) *GPU {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		node := labels["Hostname"]
		if node == "" {
			node = labels["kubernetes_node"]
		}
		key := node + "/" + labels["gpu"] + "/" + labels["UUID"]
		g, ok := gpus[key]
		if !ok {
			g = &GPU{Node: node, GPU: labels["gpu"], UUID: labels["UUID"], Model: labels["modelName"]}
			gpus[key] = g
		}
		return g
	}
	value := func(m *dto.Metric) float64 {
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Untyped != nil:
			return m.GetUntyped().GetValue()
		}
		return 0
	}
	for name, fam := range families {
		for _, m := range fam.GetMetric() {
			switch name {
			case metricXID:
				get(m).XID = value(m)
			case metricTemp:
				get(m).TempC = value(m)
			case metricFBUsed:
				g := get(m)
				g.FBUsed, g.hasFB = value(m), true
			case metricFBFree:
				get(m).FBFree = value(m)
			}
		}
	}
	out := make([]GPU, 0, len(gpus))
	for _, g := range gpus {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].GPU < out[j].GPU
	})
	return out, nil
}

// InspectGPUs finds GPUs with XID errors, too hot, or nearly out of memory.
func InspectGPUs(gpus []GPU, th Thresholds) []Finding {
	var out []Finding
	for _, g := range gpus {
		ref := Ref{APIVersion: "v1", Kind: "Node", Name: g.Node, UID: "gpu-" + g.GPU}
		where := fmt.Sprintf("GPU %s (%s, %s) on node %s", g.GPU, g.Model, g.UUID, g.Node)
		if g.XID != 0 {
			out = append(out, Finding{Kind: GPUXidError, Object: ref,
				Message: fmt.Sprintf("%s reported XID error %s: check `nvidia-smi -q` and the kernel log on the node; XIDs 48, 63, 64, 74, 79 and 94/95 usually need the GPU drained or reset", where, strconv.FormatFloat(g.XID, 'f', -1, 64))})
		}
		if g.TempC >= th.GPUTemperature {
			out = append(out, Finding{Kind: GPUHot, Object: ref,
				Message: fmt.Sprintf("%s is at %.0f°C (threshold %.0f°C): check cooling; the GPU will throttle", where, g.TempC, th.GPUTemperature)})
		}
		if total := g.FBUsed + g.FBFree; g.hasFB && total > 0 && g.FBUsed/total >= th.GPUMemory {
			out = append(out, Finding{Kind: GPUMemory, Object: ref,
				Message: fmt.Sprintf("%s uses %.0f of %.0f MiB of memory (%.0f%%): a job may fail with out-of-memory", where, g.FBUsed, total, 100*g.FBUsed/total)})
		}
	}
	sortFindings(out)
	return out
}

// ScrapeDCGM fetches and parses the exporter's metrics.
func ScrapeDCGM(ctx context.Context, c *http.Client, url string) ([]GPU, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape DCGM exporter: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape DCGM exporter %s: %s", url, resp.Status)
	}
	return ParseDCGM(io.LimitReader(resp.Body, maxScrapeBody))
}
