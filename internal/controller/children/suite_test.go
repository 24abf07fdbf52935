// SPDX-License-Identifier: Apache-2.0

package children

import (
	"context"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/scheme"
	"github.com/trainops/trainops/internal/testenv"
)

var (
	env *testenv.Env
	// k8s is an uncached client of the package's API server: the tests
	// apply children as trainops does and read what the server kept.
	k8s client.Client
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}, &env, func(_ context.Context, e *testenv.Env) (err error) {
		k8s, err = client.New(e.Config, client.Options{Scheme: scheme.New()})
		return err
	}))
}
