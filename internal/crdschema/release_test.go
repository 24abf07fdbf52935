// SPDX-License-Identifier: Apache-2.0

package crdschema

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func pyJob(t *testing.T, gpu int) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON(fmt.Appendf(nil, "apiVersion: training.trainops.dev/v1alpha1\nkind: PyJob\nmetadata:\n  name: train\n  namespace: team-a\nspec:\n  image: pytorch/pytorch:2.0-cuda11.7-cudnn8-devel\n  command: [torchrun, train.py]\n  gpu: %d\n", gpu))
	u := &unstructured.Unstructured{}
	if err == nil {
		err = u.UnmarshalJSON(j)
	}
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestStrategiesAreReleasedWhenUnused: the CEL strategies, all built by
// the load, go once unused for their keep; the next validation builds its
// kind's alone, and judges as before; validations that keep coming keep
// them.
func TestStrategiesAreReleasedWhenUnused(t *testing.T) {
	s, err := load(100*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	judge := func() (string, error) {
		t.Helper()
		if err := s.Validate(context.Background(), pyJob(t, 1), nil); err != nil {
			return "", fmt.Errorf("a valid PyJob: %w", err)
		}
		err := s.Validate(context.Background(), pyJob(t, 65), nil)
		if err == nil {
			return "", fmt.Errorf("a PyJob with 65 GPUs passed")
		}
		return err.Error(), nil
	}
	// Load builds every kind's, and keeps them as if just used.
	if s.Held() != len(s.sources) || len(s.sources) < 3 {
		t.Fatalf("%d of %d kinds' strategies held after the load", s.Held(), len(s.sources))
	}
	waitReleased := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for s.Held() > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the strategies are still held 5 s after their last use")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitReleased()
	before, err := judge()
	if err != nil {
		t.Fatal(err)
	}
	// Used every 20 ms for 400 ms: kept throughout.
	for range 20 {
		if _, err := judge(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if s.Held() == 0 {
			t.Fatal("the strategies were released while in use")
		}
	}
	waitReleased()
	after, err := judge()
	if err != nil {
		t.Fatal(err)
	}
	// Only the PyJob's were built again.
	if after != before || s.Held() != 1 {
		t.Fatalf("after a release: %q (%d kinds held), want %q (1)", after, s.Held(), before)
	}
}
