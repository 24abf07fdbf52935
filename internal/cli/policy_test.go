// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/internal/workload"
	"github.com/trainops/trainops/internal/workload/workloadtest"
)

// writeSettings writes p as a configuration file of `trainops run`.
func writeSettings(t *testing.T, dir string, p workload.Policy) string {
	t.Helper()
	m, err := workloadtest.Settings(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "trainops.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestValidateRefusesEveryCase: `trainops validate`, with the settings
// file `trainops run` reads, refuses every case of the workload policy,
// naming the file, the field and the setting, and passes each with the
// setting that allows it.
func TestValidateRefusesEveryCase(t *testing.T) {
	for i, c := range workloadtest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			repo, cfgDir := t.TempDir(), t.TempDir()
			doc, err := c.YAML("team-b", fmt.Sprintf("case-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(repo, "job.yaml"), doc, 0o600); err != nil {
				t.Fatal(err)
			}
			var p workload.Policy
			if c.Under != nil {
				c.Under(&p)
			}
			_, errOut, code := run(t, "validate", "--config", writeSettings(t, cfgDir, p), repo)
			if code != ExitChanges || !strings.Contains(errOut, "job.yaml") || !strings.Contains(errOut, c.Field) || !strings.Contains(errOut, c.Setting) {
				t.Errorf("exit %d, want %d naming job.yaml, %s and %s:\n%s", code, ExitChanges, c.Field, c.Setting, errOut)
			}
			if c.Allow == nil {
				return
			}
			c.Allow(&p)
			if _, errOut, code := run(t, "validate", "--config", writeSettings(t, cfgDir, p), repo); code != ExitOK {
				t.Errorf("with its setting: exit %d:\n%s", code, errOut)
			}
		})
	}
}
