// SPDX-License-Identifier: Apache-2.0

package monitoring

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	// trainops's metrics, registered by the packages that define them.
	_ "github.com/trainops/trainops/internal/controller"
	_ "github.com/trainops/trainops/internal/gitops"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// chartPath is the chart's folder, absolute: helm runs in its own module.
func chartPath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "..", "charts", "trainops"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rendered is the chart rendered with the PrometheusRule and dashboard on.
func rendered(t *testing.T) []map[string]any {
	t.Helper()
	cmd := exec.Command("go", "-C", "../helm", "tool", "helm", "template", "trainops", chartPath(t),
		"--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.grafanaDashboard.enabled=true")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v: %s", err, stderr.String())
	}
	var docs []map[string]any
	for _, doc := range strings.Split(string(out), "\n---") {
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		if len(m) > 0 {
			docs = append(docs, m)
		}
	}
	return docs
}

func ofKind(t *testing.T, docs []map[string]any, kind string) map[string]any {
	t.Helper()
	for _, d := range docs {
		if d["kind"] == kind {
			return d
		}
	}
	t.Fatalf("the chart renders no %s", kind)
	return nil
}

// trainopsMetrics are the names of the metrics trainops registers (a
// histogram's series too).
func trainopsMetrics(t *testing.T) []string {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName(), f.GetName()+"_bucket", f.GetName()+"_count", f.GetName()+"_sum")
	}
	// Vectors without a series yet are not gathered: read their names from
	// the Go files that define them.
	re := regexp.MustCompile(`Name:\s*"(trainops_[a-z_]+)"`)
	for _, dir := range []string{"internal/controller/*", "internal/gitops"} {
		files, _ := filepath.Glob(filepath.Join("..", "..", "..", dir, "*.go"))
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
				names = append(names, m[1], m[1]+"_bucket")
			}
		}
	}
	return names
}

// usesOnly checks that a PromQL expression parses and names only
// trainops's metrics.
func usesOnly(t *testing.T, where, expr string, known []string) {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q: %v", where, expr, err)
		return
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && !slices.Contains(known, vs.Name) {
			t.Errorf("%s: %q names %s, which trainops does not export", where, expr, vs.Name)
		}
		return nil
	})
}

// TestPrometheusRuleChecks is promtool's `check rules` on the chart's
// PrometheusRule: the groups parsed and checked by Prometheus's rulefmt,
// each expression by its PromQL parser, and each metric one trainops
// exports.
func TestPrometheusRuleChecks(t *testing.T) {
	rule := ofKind(t, rendered(t), "PrometheusRule")
	groups, err := yaml.Marshal(rule["spec"])
	if err != nil {
		t.Fatal(err)
	}
	parsed, errs := rulefmt.Parse(groups, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("rulefmt: %v\n%s", errs, groups)
	}
	known := trainopsMetrics(t)
	var alerts []string
	for _, g := range parsed.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			usesOnly(t, r.Alert, r.Expr, known)
		}
	}
	for _, want := range []string{"TrainopsGPUNodeOutOfService", "TrainopsDriverUpgradeStuck", "TrainopsSyncFailing", "TrainopsDriftRepairedRepeatedly"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s in %v", want, alerts)
		}
	}
}

// TestPromtoolCheckRules runs promtool itself (hack/tools/promtool, which
// `make test` builds and names in PROMTOOL) on the PrometheusRule's
// groups; a rule it refuses fails the test with promtool's output.
func TestPromtoolCheckRules(t *testing.T) {
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		t.Fatal("PROMTOOL is not set: `make test` builds promtool (hack/tools/promtool) and names it there")
	}
	groups, err := yaml.Marshal(ofKind(t, rendered(t), "PrometheusRule")["spec"])
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "trainops-rules.yaml")
	if err := os.WriteFile(file, groups, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s\n%s", err, out, groups)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool check rules said no SUCCESS:\n%s", out)
	}
	// The same check refuses a broken rule: the run above is promtool's.
	broken := bytes.Replace(groups, []byte("expr: "), []byte("expr: sum by ("), 1)
	if err := os.WriteFile(file, broken, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err == nil {
		t.Fatalf("promtool accepted a broken expression:\n%s", out)
	}
}

// TestPrometheusRuleOffByDefault: the chart renders none unless asked.
func TestPrometheusRuleOffByDefault(t *testing.T) {
	out, err := exec.Command("go", "-C", "../helm", "tool", "helm", "template", "trainops", chartPath(t)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "kind: PrometheusRule") || strings.Contains(string(out), "trainops-dashboard") {
		t.Fatal("the chart renders the PrometheusRule or the dashboard by default")
	}
}

// TestDashboardLoads decodes the dashboard strictly into Grafana's own
// schema types and validates it; every panel's query parses and names
// trainops's metrics.
func TestDashboardLoads(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	cm := ofKind(t, rendered(t), "ConfigMap")
	for _, d := range rendered(t) {
		if d["kind"] == "ConfigMap" && d["metadata"].(map[string]any)["name"] == "trainops-dashboard" {
			cm = d
		}
	}
	raw := cm["data"].(map[string]any)["trainops.json"].(string)
	var db dashboard.Dashboard
	if err := realError(db.UnmarshalJSONStrict([]byte(raw))); err != nil {
		t.Fatalf("the dashboard is not Grafana's schema: %v", err)
	}
	if err := realError(db.Validate()); err != nil {
		t.Fatalf("the dashboard does not validate: %v", err)
	}
	// The SDK's strict decoding checks the panels but keeps none of a
	// panel-or-row list: read the queries from the JSON itself.
	var panels struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(raw), &panels); err != nil {
		t.Fatal(err)
	}
	known := trainopsMetrics(t)
	queries := 0
	for _, p := range panels.Panels {
		for _, q := range p.Targets {
			queries++
			usesOnly(t, p.Title, q.Expr, known)
		}
	}
	if queries < 10 {
		t.Fatalf("%d queries in the dashboard", queries)
	}
}

// realError is err, or nil for the SDK's empty list of errors (a non-nil
// interface holding a nil slice).
func realError(err error) error {
	if errs, ok := err.(cog.BuildErrors); ok && len(errs) == 0 {
		return nil
	}
	return err
}
