// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainops/trainops/gitsource"
	"github.com/trainops/trainops/internal/testenv"
)

// slowFetcher stands in for a Git server: it serves one folder and counts
// fetches, taking a while as a real fetch does.
type slowFetcher struct {
	dir     string
	fetches atomic.Int64
}

func (f *slowFetcher) Fetch(ctx context.Context) (*gitsource.Checkout, error) {
	f.fetches.Add(1)
	time.Sleep(300 * time.Millisecond)
	return &gitsource.Checkout{Dir: f.dir, Revision: "main@sha1:" + "0123456789012345678901234567890123456789"}, nil
}

func TestBurstOfRequestsBecomesOneSync(t *testing.T) {
	e, _ := newEngine(t, "burst")
	r := newRepo(t).write("ns.yaml", namespaceYAML("team-burst"))
	f := &slowFetcher{dir: r.dir}
	l := NewLoop(f, e, time.Hour, time.Hour, nil, logr.Discard())
	var synced atomic.Int64
	l.Observe = func(context.Context, string, Result, error) { synced.Add(1) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Start(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for f.fetches.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// Ten pushes while the first sync runs: one more sync, not ten. Once
	// the second sync is done and no request waits, no other can start.
	for i := 0; i < 10; i++ {
		l.Request()
	}
	testenv.AfterProof(t, 10*time.Second, func() error {
		if n := synced.Load(); n < 2 {
			return fmt.Errorf("%d syncs, want 2", n)
		}
		return nil
	}, func() error {
		waiting := len(l.trigger)
		cancel()
		<-done
		if n := f.fetches.Load(); n != 2 || waiting != 0 {
			return fmt.Errorf("%d fetches, %d requests waiting after the second sync; want 2 (the start, then one for the burst) and none", n, waiting)
		}
		return nil
	})
}

// TestRequestsSinceTheLastAttemptAreServedByANewLeader: a new leader's
// first look at the inventory triggers a sync when a request was stamped
// after the last sync began (another replica took it while leadership
// changed hands), and only then.
func TestRequestsSinceTheLastAttemptAreServedByANewLeader(t *testing.T) {
	at := time.Date(2026, 12, 3, 11, 54, 0, 0, time.UTC)
	inv := func(requested, attempted string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{Data: map[string]string{}}
		if requested != "" {
			cm.Annotations = map[string]string{AnnotationSyncRequested: requested}
		}
		if attempted != "" {
			cm.Data[keyAttemptedAt] = attempted
		}
		return cm
	}
	for _, c := range []struct {
		name                 string
		requested, attempted string
		want                 bool
	}{
		{"after the attempt", at.Add(516 * time.Millisecond).Format(time.RFC3339Nano), at.Format(time.RFC3339), true},
		{"before the attempt", at.Add(-time.Second).Format(time.RFC3339Nano), at.Format(time.RFC3339), false},
		{"never attempted", at.Format(time.RFC3339Nano), "", true},
		{"never requested", "", at.Format(time.RFC3339), false},
	} {
		if got := requestedSinceAttempt(inv(c.requested, c.attempted)); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
