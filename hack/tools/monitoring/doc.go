// SPDX-License-Identifier: Apache-2.0

// Package monitoring holds the chart's PrometheusRule and Grafana dashboard
// to Prometheus's and Grafana's own code.
package monitoring
