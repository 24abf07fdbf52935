// SPDX-License-Identifier: Apache-2.0

package gitsync

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gitopsv1alpha1 "github.com/trainops/trainops/api/gitops/v1alpha1"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/testenv"
)

// silentServer accepts connections on 127.0.0.1 and never answers; it
// counts the connections open at once.
type silentServer struct {
	ln            net.Listener
	mu            sync.Mutex
	open, maxOpen int
	conns         []net.Conn
}

func startSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.open++
			s.maxOpen = max(s.maxOpen, s.open)
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			go func() {
				// Read until the client gives up; answer nothing.
				buf := make([]byte, 512)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				s.mu.Lock()
				s.open--
				s.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	})
	return s
}

func (s *silentServer) url(repo string) string { return "http://" + s.ln.Addr().String() + "/" + repo }

func (s *silentServer) counts() (open, maxOpen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open, s.maxOpen
}

// TestGitSyncNamespaceCannotStallAnother: ten GitSyncs of one namespace
// follow a server that never answers, with the longest timeout the CRD
// takes. They hold that namespace's share of the workers and no more:
// another namespace's push is synced in about its normal time, and
// deleting the ten completes without waiting for their fetches.
func TestGitSyncNamespaceCannotStallAnother(t *testing.T) {
	home, hostile, team := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	const workers, share = 8, 4
	git := startGitSyncs(t, home, func(s *GitSyncSettings) {
		s.MaxConcurrent, s.MaxConcurrentPerNamespace, s.MaxTimeout = workers, share, time.Hour
	})
	silent := startSilentServer(t)

	repo := teamRepo(t, git, "steady.git", team+"/p1")
	gs := newGitSync(t, git, team, "training", "steady.git", "")
	waitGitSync(t, gs, "ready", ready(""))
	normal := pushAndTime(t, gs, func() string { return writePyJobs(t, repo, team+"/p1", team+"/p2") })

	var stuck []*gitopsv1alpha1.GitSync
	for i := range 10 {
		stuck = append(stuck, createGitSync(t, &gitopsv1alpha1.GitSync{
			ObjectMeta: metav1.ObjectMeta{Namespace: hostile, Name: fmt.Sprintf("stuck-%d", i)},
			Spec: gitopsv1alpha1.GitSyncSpec{
				Repository: gitopsv1alpha1.GitRepository{URL: silent.url(fmt.Sprintf("r%d.git", i)), Branch: "main"},
				Interval:   &metav1.Duration{Duration: time.Hour}, Timeout: &metav1.Duration{Duration: 87600 * time.Hour}, Prune: true,
			},
		}))
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if open, _ := silent.counts(); open < share {
			return fmt.Errorf("%d fetches hang, want the namespace's share of %d", open, share)
		}
		return nil
	})

	loaded := pushAndTime(t, gs, func() string { return writePyJobs(t, repo, team+"/p1", team+"/p3") })
	t.Logf("a push synced in %s alone, %s beside ten hanging GitSyncs", normal, loaded)
	if loaded > normal+2*time.Second {
		t.Errorf("beside ten hanging GitSyncs of another namespace a push took %s, alone %s", loaded, normal)
	}
	if _, maxOpen := silent.counts(); maxOpen > share {
		t.Errorf("one namespace held %d workers in hanging fetches, its share is %d", maxOpen, share)
	}

	// Deleting them completes without waiting for their fetches.
	for _, g := range stuck {
		if err := k8s.Delete(context.Background(), g); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		for _, g := range stuck {
			if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(g), &gitopsv1alpha1.GitSync{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("GitSync %s still there (%v)", g.Name, err)
			}
		}
		return nil
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		if open, _ := silent.counts(); open != 0 {
			return fmt.Errorf("%d fetches of deleted GitSyncs still hang", open)
		}
		return nil
	})
}

// pushAndTime pushes (push returns the commit), asks gs for a sync as the
// webhook does, and returns how long until it was applied.
func pushAndTime(t *testing.T, gs *gitopsv1alpha1.GitSync, push func() string) time.Duration {
	t.Helper()
	rev := push()
	start := time.Now()
	annotate(t, gs, rev)
	waitGitSync(t, gs, "ready", ready(rev))
	return time.Since(start)
}

// TestGitSyncTimeoutIsBounded: a GitSync asking for a timeout of ten
// years against a server that never answers, and one that trickles a byte
// at a time, fail their fetch at the settings' bound.
func TestGitSyncTimeoutIsBounded(t *testing.T) {
	home, team := testenv.NewNamespace(t, k8s), testenv.NewNamespace(t, k8s)
	startGitSyncs(t, home, func(s *GitSyncSettings) { s.MaxTimeout = 2 * time.Second })
	silent := startSilentServer(t)
	trickle := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("fff0"))
		for r.Context().Err() == nil {
			_, _ = w.Write([]byte("0"))
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = trickle.Serve(ln) }()
	t.Cleanup(func() { _ = trickle.Close() })

	for name, url := range map[string]string{"silent": silent.url("r.git"), "trickle": "http://" + ln.Addr().String() + "/r.git"} {
		gs := createGitSync(t, &gitopsv1alpha1.GitSync{
			ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: name},
			Spec: gitopsv1alpha1.GitSyncSpec{
				Repository: gitopsv1alpha1.GitRepository{URL: url, Branch: "main"},
				Interval:   &metav1.Duration{Duration: time.Hour}, Timeout: &metav1.Duration{Duration: 87600 * time.Hour}, Prune: true,
			},
		})
		g := waitGitSync(t, gs, "failing its fetch", func(g *gitopsv1alpha1.GitSync) bool {
			return conditions.GetReason(g, status.ReconcilingCondition) == ReasonFetchFailed
		})
		if msg := conditions.GetMessage(g, status.ReconcilingCondition); !strings.Contains(msg, "within 2s") {
			t.Errorf("%s: the fetch failed, but not at the bound of 2s: %s", name, msg)
		}
	}
}
