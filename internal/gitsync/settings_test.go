// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/scheme"
	"github.com/trainops/trainops/internal/testenv"
)

// The settings' sync marks its revision applying without waiting for the
// caches: while the GitSync informer has not synced (here its API server
// never answers), the settings' GitSync is read from the API server, made,
// and its status says the revision is applying, as the hold needs.
func TestSettingsGitSyncDoesNotWaitForTheCache(t *testing.T) {
	silent := startSilentServer(t)
	dead := rest.CopyConfig(env.Config)
	dead.Host = "https://" + silent.ln.Addr().String()
	deadHTTP, err := rest.HTTPClientFor(dead)
	if err != nil {
		t.Fatal(err)
	}
	liveHTTP, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(env.Config, liveHTTP)
	if err != nil {
		t.Fatal(err)
	}
	never, err := cache.New(dead, cache.Options{Scheme: scheme.New(), Mapper: mapper, HTTPClient: deadHTTP})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = never.Start(ctx) }()
	// Reads from the cache that never syncs, writes to the API server.
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New(), Mapper: mapper, Cache: &client.CacheOptions{Reader: never}})
	if err != nil {
		t.Fatal(err)
	}
	home := testenv.NewNamespace(t, k8s)
	s := &SettingsGitSync{Client: c, Live: k8s, Cache: never, Key: client.ObjectKey{Namespace: home, Name: "settings"},
		Spec: &gitopsv1alpha1.GitSyncSpec{Repository: gitopsv1alpha1.GitRepository{URL: "https://git.example/settings.git", Branch: "main", Path: "."}}}

	const rev = "main@sha1:0123456789abcdef0123456789abcdef01234567"
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	defer acancel()
	s.Applying(actx, rev)
	if actx.Err() != nil {
		t.Fatal("Applying waited for the cache until its deadline")
	}
	gs := &gitopsv1alpha1.GitSync{}
	if err := k8s.Get(ctx, s.Key, gs); err != nil {
		t.Fatalf("the settings' GitSync was not made: %v", err)
	}
	if since, ok := applyingSince(gs); !ok || since.IsZero() {
		t.Fatalf("its status does not say %s is applying: %+v", rev, gs.Status.Conditions)
	}
	// The cache was really asked, and never answered.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		silent.mu.Lock()
		defer silent.mu.Unlock()
		return silent.maxOpen > 0, nil
	}); err != nil {
		t.Fatal("the cache never reached its API server: the test proves nothing")
	}
	if inf, err := never.GetInformer(ctx, gs, cache.BlockUntilSynced(false)); err != nil || inf.HasSynced() {
		t.Fatalf("the GitSync informer synced against a server that never answers (%v)", err)
	}
}
