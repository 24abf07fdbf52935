package gitops

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/trainops/trainops/gitsource"
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Start(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for f.fetches.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// Ten pushes while the first sync runs: one more sync, not ten.
	for i := 0; i < 10; i++ {
		l.Request()
	}
	time.Sleep(2 * time.Second)
	cancel()
	<-done
	if n := f.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2 (the start, then one for the burst)", n)
	}
}
