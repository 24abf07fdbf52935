// SPDX-License-Identifier: Apache-2.0

package crdschema_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trainops/trainops/internal/crdschema"
)

// BenchmarkValidatePyJob validates one new PyJob offline, as a cold sync
// does for each.
func BenchmarkValidatePyJob(b *testing.B) {
	s, err := crdschema.Load()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := yaml.YAMLToJSON([]byte(`apiVersion: training.trainops.dev/v1alpha1
kind: PyJob
metadata:
  name: job-00001
  namespace: team
  labels:
    trainops.dev/sync: trainops-system
  annotations:
    trainops.dev/applied-hash: 0123456789abcdef
spec:
  image: pytorch/pytorch:2.0-cuda11.7-cudnn8-devel
  command: ["torchrun", "train.py"]
  args: ["--epochs", "3"]
  gpu: 2
  workers: 2
  suspend: false
`))
	if err != nil {
		b.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		if err := s.Validate(ctx, u.DeepCopy(), nil); err != nil {
			b.Fatal(err)
		}
	}
}
