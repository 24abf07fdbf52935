// SPDX-License-Identifier: Apache-2.0

package status

import (
	"os"
	"testing"

	"github.com/trainops/trainops/internal/testenv"
)

var env *testenv.Env

// TestMain runs the package's tests against a real API server with
// trainops's CRDs.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.Options{}, &env)) }
