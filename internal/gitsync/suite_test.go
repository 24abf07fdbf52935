// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/scheme"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/render"
)

// isolatedLabel selects no PyJob: the GitSync reconcilers' managers cache
// none (nothing here reconciles PyJobs).
const isolatedLabel = "trainops.test/isolated"

var (
	env *testenv.Env
	k8s client.Client // uncached, for assertions
)

// TestMain runs the GitSync tests on a control plane of their own; each
// test starts its own GitSync reconciler.
func TestMain(m *testing.M) {
	render.ServeIfChild() // a test that renders starts this binary as the child
	os.Exit(testenv.Main(m, testenv.Options{Full: true}, &env, func(_ context.Context, e *testenv.Env) (err error) {
		k8s, err = client.New(e.Config, client.Options{Scheme: scheme.New()})
		return err
	}))
}
