// SPDX-License-Identifier: Apache-2.0

package convert

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/internal/crdschema"
)

// TestHelmValuesOtherSpellings: the values keys a cluster may use instead
// of those in testdata (driver.repo, top-level tolerations, an existing
// ConfigMap named for the device plugin) map or are reported.
func TestHelmValuesOtherSpellings(t *testing.T) {
	schemas, err := crdschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	values := `driver:
  repo: registry.example/nvidia
  version: "550.54.15"
tolerations:
- key: dedicated
  operator: Equal
  value: gpu
  effect: NoSchedule
devicePlugin:
  config:
    name: existing-config
`
	out, notes, err := HelmValues([]byte(values), "gpu", schemas)
	if err != nil {
		t.Fatal(err)
	}
	var cp struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(out, &cp); err != nil {
		t.Fatal(err)
	}
	if got, _ := lookup(cp.Spec, "driver.repository"); got != "registry.example/nvidia" {
		t.Errorf("driver.repo → driver.repository: %v", got)
	}
	if got, _ := lookup(cp.Spec, "tolerations"); len(got.([]any)) != 1 {
		t.Errorf("tolerations: %v", got)
	}
	if _, ok := lookup(cp.Spec, "devicePlugin.config"); ok {
		t.Errorf("a ConfigMap named but not given became a config: %v", cp.Spec)
	}
	var text []string
	for _, n := range notes {
		text = append(text, n.String())
	}
	all := strings.Join(text, "\n")
	for _, want := range []string{"mapped spec.driver.repo → spec.driver.repository", "mapped spec.tolerations", "not mapped spec.devicePlugin.config.name"} {
		if !strings.Contains(all, want) {
			t.Errorf("notes lack %q:\n%s", want, all)
		}
	}
}

// TestPrecompiledDriversRefused: values that turn on precompiled drivers
// are refused, naming the field, and nothing is written; false converts.
func TestPrecompiledDriversRefused(t *testing.T) {
	schemas, err := crdschema.Load()
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := HelmValues([]byte("driver:\n  usePrecompiled: true\n  version: \"580\"\n"), "gpu", schemas)
	if err == nil || !strings.Contains(err.Error(), "driver.usePrecompiled") || len(out) != 0 {
		t.Errorf("usePrecompiled: true gave %q, %v; want an error naming the field and no output", out, err)
	}
	if _, _, err := HelmValues([]byte("driver:\n  usePrecompiled: false\n"), "gpu", schemas); err != nil {
		t.Errorf("usePrecompiled: false: %v", err)
	}
}
