// SPDX-License-Identifier: Apache-2.0

package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTightenTakesTheStricterOfEach: a shard on defaults under a strict
// main Deployment enforces the main's policy; a stricter shard keeps its
// own; lists with nothing in common are refused.
func TestTightenTakesTheStricterOfEach(t *testing.T) {
	kinds := []string{"PyJob.training.trainops.dev", "ConfigMap", "Namespace"}
	main := Run{Sync: Sync{RequireServiceAccount: true, RefuseSecretRefs: true, AllowTolerateAllTaints: false,
		AllowedKinds: []string{"PyJob.training.trainops.dev", "ConfigMap"}, AllowedNamespaces: []string{"ml-a", "ml-b"},
		ProtectedNamespaces: []string{"finance"}, AllowedImageRegistries: []string{"nvcr.io/nvidia"}, MaxGitSyncTimeout: time.Minute},
		Render: Render{Timeout: 10 * time.Second, MaxBytes: 4 << 20}}
	shard := Run{Sync: Sync{AllowTolerateAllTaints: true, AllowedNamespaces: []string{"ml-b", "ml-c"},
		AllowedImageRegistries: []string{"nvcr.io/nvidia", "evil.example"}, ProtectedNamespaces: []string{"hr"}},
		Render: Render{MemoryLimit: 128 << 20}}
	got, err := Tighten(shard, PolicyOf(main, kinds), kinds)
	if err != nil {
		t.Fatal(err)
	}
	s := got.Sync
	switch {
	case !s.RequireServiceAccount, !s.RefuseSecretRefs, s.AllowTolerateAllTaints:
		t.Errorf("the switches are not the stricter: %+v", s)
	case !slices.Equal(s.AllowedKinds, main.Sync.AllowedKinds):
		t.Errorf("allowedKinds %v, want the main's %v", s.AllowedKinds, main.Sync.AllowedKinds)
	case !slices.Equal(s.AllowedNamespaces, []string{"ml-b"}):
		t.Errorf("allowedNamespaces %v, want what both allow", s.AllowedNamespaces)
	case !slices.Equal(s.AllowedImageRegistries, []string{"nvcr.io/nvidia"}):
		t.Errorf("allowedImageRegistries %v", s.AllowedImageRegistries)
	case !slices.Contains(s.ProtectedNamespaces, "finance") || !slices.Contains(s.ProtectedNamespaces, "hr"):
		t.Errorf("protectedNamespaces %v, want both's", s.ProtectedNamespaces)
	case s.MaxGitSyncTimeout != time.Minute:
		t.Errorf("maxGitSyncTimeout %s", s.MaxGitSyncTimeout)
	case got.Render.Timeout != 10*time.Second || got.Render.MaxBytes != 4<<20 || got.Render.MemoryLimit != 128<<20:
		t.Errorf("render %+v, want the lower of each", got.Render)
	}
	// A main on defaults leaves a stricter shard as strict.
	strict, err := Tighten(main, PolicyOf(Run{}, kinds), kinds)
	if err != nil {
		t.Fatal(err)
	}
	if !strict.Sync.RequireServiceAccount || !slices.Equal(strict.Sync.AllowedNamespaces, main.Sync.AllowedNamespaces) || strict.Sync.MaxGitSyncTimeout != time.Minute {
		t.Errorf("a strict shard under a main on defaults: %+v", strict.Sync)
	}
	if _, err := Tighten(Run{Sync: Sync{AllowedNamespaces: []string{"ml-z"}}}, PolicyOf(main, kinds), kinds); err == nil || !strings.Contains(err.Error(), "allowedNamespaces") {
		t.Errorf("disjoint namespaces: %v", err)
	}
}
