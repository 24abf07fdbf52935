// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/config"
	"github.com/trainops/trainops/internal/gitops"
)

// AnnotationFromSettings marks the GitSync that stands for the repository
// of trainops's own settings.
const AnnotationFromSettings = "gitops.trainops.dev/from-settings"

// settingsFieldOwner is the field manager of that GitSync's spec.
const settingsFieldOwner = "trainops-settings"

// SettingsGitSync is the GitSync that stands for the repository of
// trainops's settings (repo.url …), named gitops.DefaultName in trainops's
// namespace. trainops creates it and keeps its spec as the settings say
// (an edit is put back at the next sync); the settings' own sync, not the
// GitSync reconciler, syncs the repository and writes the GitSync's status,
// so `kubectl get gitsyncs -A` and `trainops status -A` show every sync.
// With no repository in the settings, it removes a GitSync it made before.
type SettingsGitSync struct {
	// Client is the manager's: GitSyncs are read from its cache once it
	// has synced them (see read).
	Client client.Client
	// Live reads the GitSync from the API server until then, and Cache
	// says when that is (both nil: always from Client).
	Live  client.Reader
	Cache cache.Informers
	Key   types.NamespacedName
	// Spec is what the settings say; nil when they name no repository.
	Spec *gitopsv1alpha1.GitSyncSpec
	// Request asks the settings' sync for a sync now.
	Request func()
}

// NeedLeaderElection: only the leader writes.
func (s *SettingsGitSync) NeedLeaderElection() bool { return true }

// Start makes the GitSync as the settings say, or removes the one made
// for settings that no longer name a repository.
func (s *SettingsGitSync) Start(ctx context.Context) error {
	if s.Spec != nil {
		// Not fatal: the sync goes on, and each sync tries again.
		_, _ = s.keep(ctx)
		return nil
	}
	gs := &gitopsv1alpha1.GitSync{}
	if err := s.read(ctx, gs); err != nil || gs.Annotations[AnnotationFromSettings] != "true" {
		return nil
	}
	// Made for a repository the settings no longer name: it never held a
	// finalizer, so it goes at once, and what was applied stays.
	_ = client.IgnoreNotFound(s.Client.Delete(ctx, gs))
	return nil
}

// keep returns the GitSync, creating it or putting its spec back when it
// differs from the settings; an unchanged one costs no request.
func (s *SettingsGitSync) keep(ctx context.Context) (*gitopsv1alpha1.GitSync, error) {
	gs := &gitopsv1alpha1.GitSync{}
	err := s.read(ctx, gs)
	if client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	if err == nil && gs.Annotations[AnnotationFromSettings] == "true" && specMatches(gs.Spec, *s.Spec) {
		return gs, nil
	}
	want := &gitopsv1alpha1.GitSync{
		TypeMeta:   metav1.TypeMeta{APIVersion: gitopsv1alpha1.GroupVersion.String(), Kind: "GitSync"},
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Key.Namespace, Name: s.Key.Name, Annotations: map[string]string{AnnotationFromSettings: "true"}},
		Spec:       *s.Spec,
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(want)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: raw}
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	if err := s.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(settingsFieldOwner), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("keep GitSync %s for the settings' repository: %w", s.Key, err)
	}
	out := &gitopsv1alpha1.GitSync{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return nil, err
	}
	return out, nil
}

// read gets the GitSync into gs: from the cache once its informer has
// synced, from the API server before. A new process's first sync marks
// its revision applying (Applying) right after its fetch: it does not wait
// for the caches, which an API server that has just started serving
// GitSyncs fills only after telling the informer to come back a second
// later.
func (s *SettingsGitSync) read(ctx context.Context, gs *gitopsv1alpha1.GitSync) error {
	if s.Live != nil && s.Cache != nil {
		inf, err := s.Cache.GetInformer(ctx, gs, cache.BlockUntilSynced(false))
		if err != nil || !inf.HasSynced() {
			return s.Live.Get(ctx, s.Key, gs)
		}
	}
	return s.Client.Get(ctx, s.Key, gs)
}

// Applying says in the GitSync's status that the settings' sync is
// applying revision, when it is new (firstAttempt, MarkApplying): its new PyJobs
// wait meanwhile (Hold).
func (s *SettingsGitSync) Applying(ctx context.Context, revision string) {
	gs, err := s.keep(ctx)
	if err != nil || gs == nil || !firstAttempt(gs, revision) {
		return
	}
	base := gs.DeepCopy()
	MarkApplying(gs, revision)
	// Best effort: nothing is held without it.
	_ = client.IgnoreNotFound(s.Client.Status().Patch(ctx, gs, client.MergeFrom(base)))
}

// Observe records the outcome of one sync of the settings' repository in
// the GitSync's status (no request when the status is unchanged).
func (s *SettingsGitSync) Observe(ctx context.Context, revision string, res gitops.Result, syncErr error) {
	gs, err := s.keep(ctx)
	if err != nil || gs == nil {
		return
	}
	base := gs.DeepCopy()
	if firstAttempt(gs, revision) {
		// Applying said the sync was applying it, which the cache may not
		// show yet: the outcome is written as a change from that, so it
		// replaces it.
		MarkApplying(base, revision)
	}
	RecordSync(gs, revision, res, syncErr)
	if v := gs.Annotations[AnnotationRequestedAt]; v != "" {
		gs.Status.LastHandledReconcileAt = v
	}
	if syncErr == nil {
		gs.Status.ObservedGeneration = gs.Generation
	}
	if equality.Semantic.DeepEqual(base.Status, gs.Status) {
		return
	}
	// Best effort: the sync's own record is its inventory.
	_ = client.IgnoreNotFound(s.Client.Status().Patch(ctx, gs, client.MergeFrom(base)))
}

// requested answers the requested-at annotation of the settings'
// GitSync: it asks the settings' sync for a sync, which records the
// annotation's value as handled.
func (s *SettingsGitSync) requested(gs *gitopsv1alpha1.GitSync) {
	if v := gs.Annotations[AnnotationRequestedAt]; v != "" && v != gs.Status.LastHandledReconcileAt && s.Request != nil {
		s.Request()
	}
}

// specMatches reports whether the live spec is the settings' want, where
// a field want leaves unset may hold the CRD's default.
func specMatches(live, want gitopsv1alpha1.GitSyncSpec) bool {
	if want.Interval == nil {
		live.Interval = nil
	}
	if want.Timeout == nil {
		live.Timeout = nil
	}
	if want.PruneBudget == "" {
		live.PruneBudget = ""
	}
	return equality.Semantic.DeepEqual(live, want)
}

// SettingsSpec is the spec of the GitSync that stands for the repository
// of the settings cfg. The interval and timeout are shown when the GitSync
// API can hold them (at least 10s and 5s).
func SettingsSpec(cfg config.Run) *gitopsv1alpha1.GitSyncSpec {
	repo := cfg.Repo
	spec := &gitopsv1alpha1.GitSyncSpec{
		Repository: gitopsv1alpha1.GitRepository{URL: gitsource.Redact(repo.URL), Branch: repo.Branch, Tag: repo.Tag, Commit: repo.Commit, Path: cmp.Or(repo.Path, ".")},
		Prune:      cfg.Sync.Prune, PruneBudget: cfg.Sync.PruneBudget, AllowEmpty: cfg.Sync.AllowEmpty, Force: cfg.Sync.Force,
	}
	if repo.Auth.SecretRef != "" {
		spec.Repository.SecretRef = &gitopsv1alpha1.LocalObjectReference{Name: repo.Auth.SecretRef}
	}
	if cfg.Sync.ReconcileInterval >= 10*time.Second {
		spec.Interval = &metav1.Duration{Duration: cfg.Sync.ReconcileInterval}
	}
	if repo.Timeout >= 5*time.Second {
		spec.Timeout = &metav1.Duration{Duration: repo.Timeout}
	}
	return spec
}
