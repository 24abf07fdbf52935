// SPDX-License-Identifier: Apache-2.0

package render_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trainops/trainops/internal/trap"
	"github.com/trainops/trainops/render"
)

// TestRemoteContentIsRefused names, in every field kustomize fetches
// from, a listener on 127.0.0.1 that would answer with valid YAML (so an
// accepting build would succeed) and fake git, helm and plugin programs
// first on PATH. Each case must be refused naming the field, with 0
// requests at the listener and no program run.
func TestRemoteContentIsRefused(t *testing.T) {
	tr := trap.New(t)
	u := tr.URL
	host := strings.TrimPrefix(u, "http://")
	tests := []struct {
		name, kustomization, field string
		files                      map[string]string
	}{
		{"resource, remote base", "resources:\n- " + u + "/org/repo//base?ref=main\n", "resources", nil},
		{"resource, remote file", "resources:\n- " + u + "/cm.yaml\n", "resources", nil},
		{"resource, https", "resources:\n- https://" + host + "/cm.yaml\n", "resources", nil},
		{"resource, scp form", "resources:\n- git@" + host + ":org/repo.git//base\n", "resources", nil},
		{"resource, ssh", "resources:\n- ssh://git@" + host + "/org/repo.git//base\n", "resources", nil},
		{"resource, github shorthand", "resources:\n- github.com/org/repo//base?ref=v1\n", "resources", nil},
		{"resource, file URL", "resources:\n- file:///etc/kubernetes\n", "resources", nil},
		{"resource, forced git", "resources:\n- git::" + u + "/org/repo//base\n", "resources", nil},
		{"bases", "bases:\n- " + u + "/org/repo//base\n", "bases", nil},
		{"components", "components:\n- " + u + "/org/repo//comp?ref=v1\n", "components", nil},
		{"openapi.path", "resources:\n- cm.yaml\nopenapi:\n  path: " + u + "/schema.json\n", "openapi.path", nil},
		{"crds", "resources:\n- cm.yaml\ncrds:\n- " + u + "/crd.yaml\n", "crds", nil},
		{"configurations", "resources:\n- cm.yaml\nconfigurations:\n- " + u + "/conf.yaml\n", "configurations", nil},
		{"generators", "generators:\n- " + u + "/gen.yaml\n", "generators", nil},
		{"transformers", "resources:\n- cm.yaml\ntransformers:\n- " + u + "/tr.yaml\n", "transformers", nil},
		{"validators", "resources:\n- cm.yaml\nvalidators:\n- " + u + "/v.yaml\n", "validators", nil},
		{"patches path", "resources:\n- cm.yaml\npatches:\n- path: " + u + "/p.yaml\n", "patches[0].path", nil},
		{"patchesStrategicMerge", "resources:\n- cm.yaml\npatchesStrategicMerge:\n- " + u + "/p.yaml\n", "patchesStrategicMerge[0]", nil},
		{"patchesJson6902", "resources:\n- cm.yaml\npatchesJson6902:\n- target:\n    kind: ConfigMap\n    name: a\n  path: " + u + "/p.yaml\n", "patchesJson6902[0].path", nil},
		{"replacements path", "resources:\n- cm.yaml\nreplacements:\n- path: " + u + "/r.yaml\n", "replacements[0].path", nil},
		{"configMapGenerator files", "configMapGenerator:\n- name: g\n  files:\n  - key=" + u + "/f.txt\n", "configMapGenerator[0].files", nil},
		{"configMapGenerator envs", "configMapGenerator:\n- name: g\n  envs:\n  - " + u + "/f.env\n", "configMapGenerator[0].envs", nil},
		{"secretGenerator files", "secretGenerator:\n- name: g\n  files:\n  - " + u + "/f.txt\n", "secretGenerator[0].files", nil},
		{"helmCharts", "helmCharts:\n- name: c\n  repo: " + u + "/charts\n  version: 1.0.0\n", "helmCharts", nil},
		{"helmGlobals", "helmGlobals:\n  chartHome: charts\nresources:\n- cm.yaml\n", "helmCharts", nil},
		{"helmChartInflationGenerator", "helmChartInflationGenerator:\n- chartName: c\n  chartRepoUrl: " + u + "/charts\n", "helmChartInflationGenerator", nil},
		{"remote entry in a base the overlay reaches", "resources:\n- base\n", "resources", map[string]string{
			"base/kustomization.yaml": "resources:\n- " + u + "/cm.yaml\n",
		}},
		{"remote component of a component", "resources:\n- cm.yaml\ncomponents:\n- comp\n", "components", map[string]string{
			"comp/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\ncomponents:\n- " + u + "/org/repo//comp\n",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"kustomization.yaml": tc.kustomization, "cm.yaml": cmYAML("a")}
			for p, c := range tc.files {
				files[p] = c
			}
			root := tree(t, files)
			objs, err := render.Render(root, ".")
			if err == nil {
				t.Fatalf("rendered %s", ids(objs))
			}
			for _, want := range []string{"kustomization.yaml", "field " + tc.field} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if !strings.Contains(err.Error(), "remote content") && !strings.Contains(err.Error(), "runs no programs") {
				t.Errorf("error %q does not say remote content is not allowed", err)
			}
			tr.AssertUntouched(t)
		})
	}
}

// TestLocalEntriesStillBuild keeps every field usable with paths inside
// the repository, so the refusals above are not a blanket refusal.
func TestLocalEntriesStillBuild(t *testing.T) {
	tr := trap.New(t)
	root := tree(t, map[string]string{
		"kustomization.yaml": "resources:\n- base\ncomponents:\n- comp\nconfigMapGenerator:\n- name: gen\n  files:\n  - key=data.txt\n  envs:\n  - vars.env\n" +
			"patches:\n- path: patch.yaml\n- patch: |-\n    - op: add\n      path: /data/inline\n      value: \"1\"\n  target:\n    kind: ConfigMap\n    name: a\n" +
			"replacements:\n- path: repl.yaml\n",
		"base/kustomization.yaml": "resources:\n- cm.yaml\n",
		"base/cm.yaml":            cmYAML("a") + "data:\n  x: \"1\"\n",
		"comp/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources:\n- extra.yaml\n",
		"comp/extra.yaml":         cmYAML("extra"),
		"data.txt":                "hello",
		"vars.env":                "A=1\n",
		"patch.yaml":              "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  patched: \"yes\"\n",
		"repl.yaml":               "source:\n  kind: ConfigMap\n  name: a\n  fieldPath: data.x\ntargets:\n- select:\n    kind: ConfigMap\n    name: extra\n  fieldPaths:\n  - data.copied\n  options:\n    create: true\n",
	})
	objs, err := render.Render(root, ".")
	if err != nil {
		t.Fatal(err)
	}
	got := ids(objs)
	for _, want := range []string{"ConfigMap a@base/cm.yaml", "ConfigMap extra@comp/extra.yaml"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in %s", want, got)
		}
	}
	for _, o := range objs {
		if o.GetName() == "a" {
			if v := o.Object["data"].(map[string]any); v["patched"] != "yes" || v["inline"] != "1" {
				t.Errorf("patches not applied: %v", v)
			}
		}
		if o.GetName() == "extra" {
			if v := o.Object["data"].(map[string]any); fmt.Sprint(v["copied"]) != "1" {
				t.Errorf("replacement not applied: %v", v)
			}
		}
	}
	if len(objs) != 3 {
		t.Errorf("want 3 objects (a, extra, the generated one), got %s", got)
	}
	tr.AssertUntouched(t)
}

// TestKustomizationLeavingTheRepository refuses a kustomization file that
// is a symlink out of the repository, and entries leaving it, without
// reading what is outside.
func TestKustomizationLeavingTheRepository(t *testing.T) {
	outside := tree(t, map[string]string{
		"kustomization.yaml": "secretFieldName: stolen\nresources:\n- cm.yaml\n",
		"cm.yaml":            cmYAML("stolen"),
	})
	t.Run("kustomization.yaml is a symlink out", func(t *testing.T) {
		root := tree(t, nil)
		if err := os.Symlink(filepath.Join(outside, "kustomization.yaml"), filepath.Join(root, "kustomization.yaml")); err != nil {
			t.Fatal(err)
		}
		_, err := render.Render(root, ".")
		if err == nil || !strings.Contains(err.Error(), "symlink that leaves the repository") || strings.Contains(err.Error(), "secretFieldName") || strings.Contains(err.Error(), "stolen") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("absolute resource", func(t *testing.T) {
		root := tree(t, map[string]string{"kustomization.yaml": "resources:\n- " + filepath.Join(outside, "cm.yaml") + "\n"})
		_, err := render.Render(root, ".")
		if err == nil || !strings.Contains(err.Error(), "field resources") || !strings.Contains(err.Error(), "absolute path") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("generator file through a symlinked folder", func(t *testing.T) {
		root := tree(t, map[string]string{"kustomization.yaml": "configMapGenerator:\n- name: g\n  files:\n  - out/cm.yaml\n"})
		if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
			t.Fatal(err)
		}
		_, err := render.Render(root, ".")
		if err == nil || !strings.Contains(err.Error(), "configMapGenerator[0].files") || !strings.Contains(err.Error(), "symlink that leaves") || strings.Contains(err.Error(), "stolen") {
			t.Fatalf("error %v", err)
		}
	})
}

// TestKustomizeInputsWithinLimits refuses, before kustomize parses them,
// an alias bomb listed in resources or written inline as a patch, an
// alias inside its own anchor (kustomize's reader would follow it until
// its stack overflows), a file
// past MaxFileBytes reached through resources or a generator, and a set
// of files past MaxBytes.
func TestKustomizeInputsWithinLimits(t *testing.T) {
	big := strings.Repeat("x", render.MaxFileBytes+1)
	tests := []struct {
		name   string
		files  map[string]string
		limits render.Limits
		want   []string
	}{
		{"alias bomb in resources", map[string]string{"kustomization.yaml": "resources:\n- bomb.yaml\n", "bomb.yaml": trap.AliasBomb}, render.Limits{}, []string{"bomb.yaml", "document 1"}},
		{"alias bomb as an inline patch", map[string]string{"kustomization.yaml": "resources:\n- cm.yaml\npatches:\n- patch: |\n" + indent(trap.AliasBomb, "    ") + "  target:\n    kind: ConfigMap\n", "cm.yaml": cmYAML("a")}, render.Limits{}, []string{"kustomization.yaml", "field patches[0].patch"}},
		{"alias inside its own anchor in resources", map[string]string{"kustomization.yaml": "resources:\n- self.yaml\n", "self.yaml": cmYAML("a") + "data: &d {x: *d}\n"}, render.Limits{}, []string{"self.yaml", "document 1", "anchor 'd' value contains itself"}},
		{"alias inside its own anchor in a patch file", map[string]string{"kustomization.yaml": "resources:\n- cm.yaml\npatches:\n- path: p.yaml\n", "cm.yaml": cmYAML("a"), "p.yaml": cmYAML("a") + "data: &d [*d]\n"}, render.Limits{NoFastPath: true}, []string{"p.yaml", "anchor 'd' value contains itself"}},
		{"big file in resources", map[string]string{"kustomization.yaml": "resources:\n- big.yaml\n", "big.yaml": big}, render.Limits{}, []string{"kustomization.yaml", "field resources", "big.yaml", "larger than 8 MiB"}},
		{"big file in a generator", map[string]string{"kustomization.yaml": "configMapGenerator:\n- name: g\n  files:\n  - big.bin\n", "big.bin": big}, render.Limits{}, []string{"field configMapGenerator[0].files", "big.bin", "larger than 8 MiB"}},
		{"files past maxBytes", map[string]string{"kustomization.yaml": "resources:\n- a.yaml\n- b.yaml\n", "a.yaml": cmYAML("a") + "data:\n  x: \"" + strings.Repeat("a", 700<<10) + "\"\n", "b.yaml": cmYAML("b") + "data:\n  x: \"" + strings.Repeat("b", 700<<10) + "\"\n"}, render.Limits{MaxBytes: 1 << 20}, []string{"field resources", "add up to more than 1 MiB"}},
		{"plain folder past maxBytes", map[string]string{"a.yaml": cmYAML("a") + "data:\n  x: \"" + strings.Repeat("a", 700<<10) + "\"\n", "b.yaml": cmYAML("b") + "data:\n  x: \"" + strings.Repeat("b", 700<<10) + "\"\n"}, render.Limits{MaxBytes: 1 << 20}, []string{"b.yaml", "add up to more than 1 MiB"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t, tc.files)
			objs, err := render.RenderContext(t.Context(), root, ".", tc.limits)
			if err == nil {
				t.Fatalf("rendered %s", ids(objs))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func indent(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	return b.String()
}

// TestRemoteDetection pins which entries are remote.
func TestRemoteDetection(t *testing.T) {
	for e, want := range map[string]bool{
		"https://example.com/x.yaml":           true,
		"HTTP://example.com/x":                 true,
		"git@github.com:org/repo":              true,
		"deploy@host:repo.git":                 true,
		"ssh://git@host/repo":                  true,
		"github.com/org/repo/base":             true,
		"GitHub.com:org/repo":                  true,
		"git::https://host/repo":               true,
		"file:///etc":                          true,
		"s3://bucket/x":                        true,
		"gitlab.example.com/org/repo//x?ref=1": true,
		"base":                                 false,
		"../base":                              false,
		"jobs/a.yaml":                          false,
		"my@dir":                               true,
		fmt.Sprintf("dir-%d/x.yaml", 1):        false,
	} {
		if got := render.IsRemote(e); got != want {
			t.Errorf("IsRemote(%q) = %v, want %v", e, got, want)
		}
	}
}

// TestNoProgramRuns: a KRM function to exec and a containerized function,
// both pointing at a script of the repository's own that would leave a
// marker, are refused, and the script never ran.
func TestNoProgramRuns(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	script := "#!/bin/sh\ntouch " + marker + "\ncat\n"
	fn := func(spec string) string {
		return "apiVersion: example.com/v1\nkind: Fn\nmetadata:\n  name: f\n  annotations:\n    config.kubernetes.io/function: |\n" + indent(spec, "      ")
	}
	for name, spec := range map[string]string{
		"exec function":      "exec:\n  path: ./fn.sh\n",
		"container function": "container:\n  image: example.com/fn:1\n",
	} {
		for _, field := range []string{"transformers", "generators", "validators"} {
			t.Run(name+" in "+field, func(t *testing.T) {
				root := tree(t, map[string]string{
					"kustomization.yaml": "resources:\n- cm.yaml\n" + field + ":\n- fn.yaml\n",
					"cm.yaml":            cmYAML("a"),
					"fn.yaml":            fn(spec),
					"fn.sh":              script,
				})
				if err := os.Chmod(filepath.Join(root, "fn.sh"), 0o755); err != nil {
					t.Fatal(err)
				}
				objs, err := render.Render(root, ".")
				if err == nil {
					t.Fatalf("rendered %s", ids(objs))
				}
				if !strings.Contains(err.Error(), "kustomization.yaml") {
					t.Errorf("error %q does not name the kustomization", err)
				}
				if _, serr := os.Stat(marker); serr == nil {
					t.Fatal("the repository's program ran")
				}
			})
		}
	}
}

// TestInlineAndLinkedEntries: a strategic-merge patch written inline on one
// line is not taken for a missing file, and a base reached through a
// symlinked folder inside the repository builds.
func TestInlineAndLinkedEntries(t *testing.T) {
	root := tree(t, map[string]string{
		"kustomization.yaml":      "resources:\n- linked\npatchesStrategicMerge:\n- '{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"a\"}, \"data\": {\"p\": \"1\"}}'\n",
		"real/kustomization.yaml": "resources:\n- cm.yaml\n",
		"real/cm.yaml":            cmYAML("a"),
	})
	if err := os.Symlink("real", filepath.Join(root, "linked")); err != nil {
		t.Fatal(err)
	}
	objs, err := render.Render(root, ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || fmt.Sprint(objs[0].Object["data"]) != "map[p:1]" {
		t.Fatalf("rendered %s: %v", ids(objs), objs[0].Object)
	}
}

// TestInlinePluginConfigReachesNothing: a transformer written inline,
// whose own path field names a remote patch, passes the pre-scan (it
// reads no plugin's fields) and is stopped by the isolated build: refused,
// 0 requests, no program run.
func TestInlinePluginConfigReachesNothing(t *testing.T) {
	tr := trap.New(t)
	root := tree(t, map[string]string{
		"kustomization.yaml": "resources:\n- cm.yaml\ntransformers:\n- |\n  apiVersion: builtin\n  kind: PatchTransformer\n  metadata:\n    name: p\n  path: " + tr.URL + "/patch.yaml\n  target:\n    kind: ConfigMap\n",
		"cm.yaml":            cmYAML("a"),
	})
	objs, err := render.Render(root, ".")
	if err == nil {
		t.Fatalf("rendered %s", ids(objs))
	}
	if !strings.Contains(err.Error(), "kustomization.yaml") {
		t.Errorf("error %q does not name the kustomization", err)
	}
	tr.AssertUntouched(t)
}
