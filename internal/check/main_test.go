// SPDX-License-Identifier: Apache-2.0

package check_test

import (
	"os"
	"testing"

	"github.com/trainops/trainops/render"
)

// TestMain serves a render child when a test starts this binary as one.
func TestMain(m *testing.M) {
	render.ServeIfChild()
	os.Exit(m.Run())
}
