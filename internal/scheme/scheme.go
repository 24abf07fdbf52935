// SPDX-License-Identifier: Apache-2.0

// Package scheme builds the type registry every trainops client uses: the
// built-in kinds and trainops's own APIs.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	aiopsv1alpha1 "github.com/trainops/trainops/api/aiops/v1alpha1"
	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
)

// New knows the built-in kinds and trainops's APIs (PyJob, SREAgent,
// ClusterPolicy, GitSync).
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(trainingv1alpha1.AddToScheme(s))
	utilruntime.Must(aiopsv1alpha1.AddToScheme(s))
	utilruntime.Must(gpuv1alpha1.AddToScheme(s))
	utilruntime.Must(gitopsv1alpha1.AddToScheme(s))
	return s
}
