// SPDX-License-Identifier: Apache-2.0

package notify

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// forge answers commit-status calls: failing the first fails, then 201.
type forge struct {
	mu    sync.Mutex
	fails int
	calls []map[string]string
}

func (f *forge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body := map[string]string{}
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.calls = append(f.calls, body)
	if f.fails > 0 {
		f.fails--
		// A forge that echoes what it was sent, token included.
		http.Error(w, "try again, "+r.Header.Get("Authorization"), http.StatusBadGateway)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (f *forge) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func TestNotifierRetriesDeduplicatesAndHidesTheToken(t *testing.T) {
	f := &forge{fails: 2}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var logMu sync.Mutex
	var logs strings.Builder
	n := &Notifier{Log: funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		logs.WriteString(prefix + args + "\n")
	}, funcr.Options{Verbosity: 1})}
	// Retries come at once: the clock is moved past each wait.
	var clockMu sync.Mutex
	now := time.Now()
	n.now = func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		now = now.Add(time.Hour)
		return now
	}
	tg, err := TargetFor(Gitea, srv.URL, srv.URL+"/ml/cfg.git", "trainops/team/cfg", "secret-token-1234")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = n.Start(ctx) }()
	sha := strings.Repeat("1", 40)
	st := Status{Commit: sha, State: Success, Description: "applied"}
	n.Post(tg, st)
	waitFor(t, func() bool { return f.count() == 3 }) // two failures, one success
	// The same status again is not sent; a new one is.
	n.Post(tg, st)
	n.Post(tg, Status{Commit: sha, State: Failure, Description: "refused"})
	// The queue is in order: a repeat sent would come before the failure.
	waitFor(t, func() bool { return f.count() >= 4 })
	f.mu.Lock()
	fourth := f.calls[3]["state"]
	f.mu.Unlock()
	if fourth != "failure" {
		t.Errorf("fourth call is %q: the repeated status was sent again", fourth)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logs.String(), "retrying") || strings.Contains(logs.String(), "secret-token-1234") {
		t.Errorf("log does not say it retried, or shows the token:\n%s", logs.String())
	}
}

// A forge that never answers holds no sync: Post returns at once, and
// the call gives up at the client's timeout.
func TestNotifierNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	n := &Notifier{Log: logr.Discard(), Client: &http.Client{Timeout: 200 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = n.Start(ctx) }()
	tg, _ := TargetFor(GitHub, srv.URL, "https://github.com/ml/cfg", "trainops", "tok")
	start := time.Now()
	for i := range 2000 {
		n.Post(tg, Status{Commit: strings.Repeat(string(rune('a'+i%6)), 40), State: Success, Description: "applied"})
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Post waited %s", d)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.pending) > maxPending {
		t.Fatalf("%d statuses waiting, bound %d", len(n.pending), maxPending)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAForgeThatNeverAnswersHoldsOnlyItsOwn: while a call to one team's
// forge hangs, another team's status goes out at once.
func TestAForgeThatNeverAnswersHoldsOnlyItsOwn(t *testing.T) {
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer hanging.Close()
	defer close(release)
	good := &forge{}
	srv := httptest.NewServer(good)
	defer srv.Close()
	n := &Notifier{Log: logr.Discard(), Client: &http.Client{Timeout: time.Minute}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = n.Start(ctx) }()
	stuck, _ := TargetFor(Gitea, hanging.URL, hanging.URL+"/a/cfg.git", "trainops/a/cfg", "tok-a")
	fine, _ := TargetFor(Gitea, srv.URL, srv.URL+"/b/cfg.git", "trainops/b/cfg", "tok-b")
	sha := strings.Repeat("2", 40)
	n.Post(stuck, Status{Commit: sha, State: Success, Description: "applied"})
	n.Post(fine, Status{Commit: sha, State: Success, Description: "applied"})
	// Within waitFor's bound, far below the hanging call's minute.
	waitFor(t, func() bool { return good.count() == 1 })
}
