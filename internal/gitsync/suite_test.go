// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"os"
	"testing"
	"time"

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

func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	testenv.Eventually(t, timeout, check)
}

// update is testenv.Update with the package's client.
func update[T client.Object](t *testing.T, obj T, change func(T)) {
	t.Helper()
	testenv.Update(t, k8s, obj, change)
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	return testenv.NewNamespace(t, k8s)
}
