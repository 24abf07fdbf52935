// SPDX-License-Identifier: Apache-2.0

// Package gpuhealth reads the health of GPU nodes: the DCGM exporter's
// metrics, the classification of what they report (XID errors, ECC,
// row remapping, temperature) and the Node conditions a health reporter
// sets. Its only I/O is one scrape of one exporter.
package gpuhealth

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// DCGM exporter metrics read, by the names the exporter's collectors file
// gives them (MetricsRead lists them for the parity test).
const (
	MetricXID             = "DCGM_FI_DEV_XID_ERRORS"
	MetricTemp            = "DCGM_FI_DEV_GPU_TEMP"
	MetricFBUsed          = "DCGM_FI_DEV_FB_USED"
	MetricFBFree          = "DCGM_FI_DEV_FB_FREE"
	MetricRowRemapFailure = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
	// MetricECCDBEVolatile is commented out in the exporter's default
	// collectors file: it counts only where a cluster's own file turns it
	// on.
	MetricECCDBEVolatile = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"

	// MaxScrapeBody caps what one scrape reads.
	MaxScrapeBody = 16 << 20
)

// MetricsRead are the exporter's metrics this package reads.
var MetricsRead = []string{MetricXID, MetricTemp, MetricFBUsed, MetricFBFree, MetricRowRemapFailure, MetricECCDBEVolatile}

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
	// HasFB, HasXID: the exporter reported the memory and XID fields.
	HasFB  bool
	HasXID bool
	// RowRemapFailure is true when the GPU could not remap a row of its
	// memory after an uncorrectable error.
	RowRemapFailure bool
	// ECCDBE counts double-bit (uncorrectable) ECC errors since the
	// driver was loaded.
	ECCDBE float64
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
	for name, fam := range families {
		for _, m := range fam.GetMetric() {
			switch name {
			case MetricXID:
				g := get(m)
				g.XID, g.HasXID = value(m), true
			case MetricTemp:
				get(m).TempC = value(m)
			case MetricFBUsed:
				g := get(m)
				g.FBUsed, g.HasFB = value(m), true
			case MetricFBFree:
				get(m).FBFree = value(m)
			case MetricRowRemapFailure:
				get(m).RowRemapFailure = value(m) != 0
			case MetricECCDBEVolatile:
				get(m).ECCDBE = value(m)
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

func value(m *dto.Metric) float64 {
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
	return ParseDCGM(io.LimitReader(resp.Body, MaxScrapeBody))
}
