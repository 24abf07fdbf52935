// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/trainops/trainops/internal/version"
)

func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Execute(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestVersionPrintsVersionCommitAndGo(t *testing.T) {
	version.Version, version.Commit = "v9.8.7", "0123abcd"
	t.Cleanup(func() { version.Version, version.Commit = "dev", "unknown" })
	out, _, code := run(t, "version")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"v9.8.7", "0123abcd", runtime.Version()} {
		if !strings.Contains(out, want) {
			t.Errorf("version output %q lacks %q", out, want)
		}
	}
}

func TestHelpListsSubcommands(t *testing.T) {
	out, _, code := run(t, "--help")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, c := range NewRootCommand(nil, nil).Commands() {
		if !c.Hidden && !strings.Contains(out, c.Name()) {
			t.Errorf("--help does not list %q:\n%s", c.Name(), out)
		}
	}
}

func TestUnknownCommandIsUsageError(t *testing.T) {
	_, errOut, code := run(t, "frobnicate")
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d", code, ExitUsage)
	}
	if !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Fatalf("stderr %q does not name the unknown command", errOut)
	}
}

// mustContain fails t for each of wants that text (what, in messages)
// lacks.
func mustContain(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, text)
		}
	}
}
