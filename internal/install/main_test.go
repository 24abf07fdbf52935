// SPDX-License-Identifier: Apache-2.0

package install

import (
	"os"
	"testing"

	"github.com/trainops/trainops/internal/testenv"
)

// TestMain serves a render child when a test starts this binary as one.
func TestMain(m *testing.M) {
	os.Exit(testenv.Offline(m))
}
