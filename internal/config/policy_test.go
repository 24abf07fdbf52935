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

// TestTightenPodPowers: of the pod powers a shard enforces the stricter
// of its own and the main's: the stricter Pod Security level, what both
// lists allow, each switch only when both allow it.
func TestTightenPodPowers(t *testing.T) {
	main := Run{Sync: Sync{PodPowers: PodPowers{PodSecurityLevel: PodSecurityRestricted, AllowNodeName: true,
		AllowedVolumeTypes: []string{"nfs", "csi"}, AllowResourceClaims: true}}}
	shard := Run{Sync: Sync{PodPowers: PodPowers{PodSecurityLevel: PodSecurityPrivileged, AllowNodeName: true,
		AllowedVolumeTypes: []string{"csi", "iscsi"}, AllowReservedTolerations: true}}}
	kinds := []string{"PyJob.training.trainops.dev"}
	got, err := Tighten(shard, PolicyOf(main, kinds), kinds)
	if err != nil {
		t.Fatal(err)
	}
	p := got.Sync.PodPowers
	if p.PodSecurityLevel != PodSecurityRestricted || !p.AllowNodeName || p.AllowReservedTolerations || p.AllowResourceClaims || !slices.Equal(p.AllowedVolumeTypes, []string{"csi"}) {
		t.Errorf("tightened pod powers %+v", p)
	}
	if StricterPodSecurity("", PodSecurityPrivileged) != "" || StricterPodSecurity(PodSecurityBaseline, PodSecurityRestricted) != PodSecurityRestricted {
		t.Error("StricterPodSecurity")
	}
	bad := Run{Namespace: "x", LogFormat: "json", Controllers: DefaultControllers("dev"), Sync: Sync{PodPowers: PodPowers{PodSecurityLevel: "strict"}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "podSecurityLevel") {
		t.Errorf("an unknown level: %v", err)
	}
}

// TestTightenLoadRestrictor: a shard reads files outside a kustomization's
// folder only where both it and the main allow it; a value that is not
// kustomize's is refused naming the setting.
func TestTightenLoadRestrictor(t *testing.T) {
	kinds := []string{"PyJob.training.trainops.dev"}
	none := Render{LoadRestrictor: LoadRestrictionsNone}
	for _, c := range []struct {
		shard, main Render
		want        string
	}{
		{none, Render{}, ""},
		{none, Render{LoadRestrictor: LoadRestrictionsRootOnly}, LoadRestrictionsRootOnly},
		{Render{}, none, ""},
		{none, none, LoadRestrictionsNone},
	} {
		got, err := Tighten(Run{Render: c.shard}, PolicyOf(Run{Render: c.main}, kinds), kinds)
		if err != nil {
			t.Fatal(err)
		}
		if got.Render.LoadRestrictor != c.want {
			t.Errorf("shard %q under main %q: %q, want %q", c.shard.LoadRestrictor, c.main.LoadRestrictor, got.Render.LoadRestrictor, c.want)
		}
	}
	if err := CheckLoadRestrictor("RootOnly"); err == nil || !strings.Contains(err.Error(), "render.loadRestrictor") || !strings.Contains(err.Error(), LoadRestrictionsNone) {
		t.Errorf("a value kustomize has not: %v", err)
	}
}
