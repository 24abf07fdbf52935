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
func Main(m *testing.M, opts Options, env **Env) int {
	e, err := Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start local control plane: %v\n", err)
		return 1
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stop local control plane: %v\n", err)
	}
	return code
}
