// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/controller"
	"github.com/trainops/trainops/internal/testenv"
	"github.com/trainops/trainops/render"
)

var (
	env *testenv.Env
	k8s client.Client // uncached, for assertions
	// images are the references pods name `make image`'s images by.
	images *Images
)

func TestMain(m *testing.M) {
	render.ServeIfChild() // a test that renders starts this binary as the child
	os.Exit(testenv.Main(m, testenv.Options{RealNode: true, GPUNodes: 1, GPUsPerNode: 4, Progress: os.Stderr}, &env, setup))
}

// setup loads the training and trainops images into the real node and runs
// trainops's reconcilers.
func setup(ctx context.Context, e *testenv.Env) error {
	var err error
	if k8s, err = client.New(e.Config, client.Options{Scheme: controller.NewScheme()}); err != nil {
		return err
	}
	if e.RealNode == "" {
		return nil
	}
	if images, err = Prepare(ctx, e, k8s); err != nil {
		return err
	}
	return RunReconcilers(ctx, e, images.Trainops)
}
