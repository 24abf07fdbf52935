// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

func loadWith(t *testing.T, file string, args ...string) (runCfg, error) {
	t.Helper()
	cmd := &cobra.Command{Use: "run"}
	s := newSettings(cmd, runSettings())
	if file != "" {
		args = append(args, "--config="+file)
	}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadRunConfig(s)
	return runCfg{cfg.Controllers.MaxConcurrentReconciles, cfg.Controllers.RetryDelay, cfg.MetricsAddr}, err
}

type runCfg struct {
	workers int
	retry   time.Duration
	metrics string
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "trainops.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSettingsPrecedence(t *testing.T) {
	file := writeFile(t, "maxConcurrentReconciles: 7\nretryDelay: 45s\nmetricsBindAddress: 127.0.0.1:9999\n")

	got, err := loadWith(t, "")
	if err != nil || got.workers != 16 || got.retry != 10*time.Second || got.metrics != "127.0.0.1:8080" {
		t.Fatalf("defaults: %+v %v", got, err)
	}
	got, err = loadWith(t, file)
	if err != nil || got.workers != 7 || got.retry != 45*time.Second || got.metrics != "127.0.0.1:9999" {
		t.Fatalf("file over defaults: %+v %v", got, err)
	}
	t.Setenv("TRAINOPS_MAX_CONCURRENT_RECONCILES", "9")
	t.Setenv("TRAINOPS_RETRY_DELAY", "1m")
	got, err = loadWith(t, file)
	if err != nil || got.workers != 9 || got.retry != time.Minute {
		t.Fatalf("environment over file: %+v %v", got, err)
	}
	got, err = loadWith(t, file, "--max-concurrent-reconciles=2", "--retry-delay=5s")
	if err != nil || got.workers != 2 || got.retry != 5*time.Second {
		t.Fatalf("flags over environment: %+v %v", got, err)
	}
}

func TestSettingsErrorsNameTheProblem(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		args       []string
		env        [2]string
		want       []string
	}{
		{"unknown key", "maxConcurentReconciles: 3\n", nil, [2]string{}, []string{"trainops.yaml", `unknown key "maxConcurentReconciles"`, "maxConcurrentReconciles"}},
		{"bad duration in file", "retryDelay: soon\n", nil, [2]string{}, []string{"retryDelay", `"soon" is not a duration`}},
		{"bad number in env", "", nil, [2]string{"TRAINOPS_MAX_CONCURRENT_RECONCILES", "many"}, []string{"maxConcurrentReconciles", `"many" is not a whole number`}},
		{"zero workers", "", []string{"--max-concurrent-reconciles=0"}, [2]string{}, []string{"maxConcurrentReconciles must be at least 1"}},
		{"not YAML", "retryDelay: [\n", nil, [2]string{}, []string{"trainops.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env[0] != "" {
				t.Setenv(tc.env[0], tc.env[1])
			}
			file := ""
			if tc.file != "" {
				file = writeFile(t, tc.file)
			}
			_, err := loadWith(t, file, tc.args...)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{"reconcileInterval": "TRAINOPS_RECONCILE_INTERVAL", "kubeconfig": "TRAINOPS_KUBECONFIG", "maxConcurrentReconciles": "TRAINOPS_MAX_CONCURRENT_RECONCILES"} {
		if got := envName(in); got != want {
			t.Errorf("envName(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestPrintConfigShowsEffectiveSettingsWithoutSecrets(t *testing.T) {
	file := writeFile(t, "repo:\n  url: https://deploy:hunter2-token@git.example/ml/config.git\n  branch: prod\nreconcileInterval: 2m\n")
	var out, errOut bytes.Buffer
	code := Execute([]string{"run", "--config=" + file, "--print-config", "--prune=false"}, &out, &errOut)
	for _, want := range []string{"reconcileInterval: 2m0s", "repo.branch: prod", "prune: false", "repo.url: https://redacted@git.example/ml/config.git"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--print-config lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String()+errOut.String(), "hunter2") {
		t.Fatalf("--print-config leaks the password:\n%s%s", out.String(), errOut.String())
	}
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}

func TestRunRefusesBadValuesNamingTheKey(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--repo-url=https://git.example/r.git", "--prune-budget=lots"}, `pruneBudget: "lots"`},
		{[]string{"--repo-url=https://git.example/r.git", "--allowed-kinds=pyjob"}, `allowedKinds: "pyjob"`},
		{[]string{"--repo-url=https://git.example/r.git", "--reconcile-interval=10ms"}, "reconcileInterval: 10ms is too short"},
		{[]string{"--repo-url=https://git.example/r.git", "--repo-branch=a", "--repo-tag=b"}, "set only one"},
		{[]string{"--repo-url=https://git.example/r.git", "--webhook-bind-address=127.0.0.1:0"}, "unauthenticated webhook is refused"},
		{[]string{"--log-format=xml"}, `logFormat: "xml"`},
	} {
		var out, errOut bytes.Buffer
		code := Execute(append([]string{"run"}, tc.args...), &out, &errOut)
		if code == ExitOK || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error containing %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// TestCredentialsInURLsNeverShow: every form of credential in repo.url (a
// password, a token as the user, a URL without a scheme) is absent from
// --print-config (gitsource's tests cover the errors).
func TestCredentialsInURLsNeverShow(t *testing.T) {
	const token = "ghp_TokenNeverShown123"
	for _, u := range []string{
		"https://" + token + "@git.example/ml/config.git",
		"https://deploy:" + token + "@git.example/ml/config.git",
		"http://x-access-token:" + token + "@git.example/ml/config.git",
		token + "@git.example/ml/config.git",
		"ssh://git:" + token + "@git.example/ml/config.git",
	} {
		t.Run(u[:12], func(t *testing.T) {
			var out, errOut bytes.Buffer
			Execute([]string{"run", "--repo-url=" + u, "--print-config"}, &out, &errOut)
			if all := out.String() + errOut.String(); strings.Contains(all, token) {
				t.Fatalf("the token shows:\n%s", all)
			}
			if !strings.Contains(out.String(), "repo.url: ") {
				t.Fatalf("print-config %q", out.String())
			}
		})
	}
}
