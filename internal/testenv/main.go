// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// Main starts a control plane for a test package, runs its tests and stops
// the control plane, whatever the tests did. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.Options{Full: true}, &env)) }
//
// Each setup function runs once the cluster is up, with a context that is
// cancelled before the cluster stops (so managers started there end first).
//
// With opts.RealNode, Main runs the test binary again inside a network and
// mount namespace of its own (see netns.go) and returns its exit code; on
// a machine that cannot run a real node it says why and runs the tests
// without one.
func Main(m *testing.M, opts Options, env **Env, setup ...func(context.Context, *Env) error) int {
	if opts.RealNode && !InNodeNamespace() {
		if nodeMissing = NodeMissing(); nodeMissing == "" {
			code, err := RunInNodeNamespace()
			if err != nil {
				fmt.Fprintf(os.Stderr, "real node: %v\n", err)
			}
			return code
		}
		fmt.Fprintf(os.Stderr, "real node: not started: %s\n", nodeMissing)
		opts.RealNode = false
	}
	e, err := Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start local control plane: %v\n", err)
		return 1
	}
	*env = e
	ctx, cancel := context.WithCancel(context.Background())
	for _, s := range setup {
		if err := s(ctx, e); err != nil {
			fmt.Fprintf(os.Stderr, "set up tests: %v\n", err)
			cancel()
			_ = e.Stop()
			return 1
		}
	}
	code := m.Run()
	cancel()
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stop local control plane: %v\n", err)
	}
	return code
}

// nodeMissing is why this machine runs no real node, once Main asked.
var nodeMissing string

// RequireRealNode skips a test that needs the real node when this machine
// cannot run one, saying what it lacks.
func RequireRealNode(t testing.TB, e *Env) {
	t.Helper()
	if e.RealNode == "" {
		t.Skipf("no real node on this machine: %s", nodeMissing)
	}
}
