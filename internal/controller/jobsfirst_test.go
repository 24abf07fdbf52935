package controller

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestJobsFirstWait checks the wait of the other kinds: none without a
// first pass, until the quiet after the last one ends, and never past its
// context.
func TestJobsFirstWait(t *testing.T) {
	ctx := context.Background()
	var nilJobs *JobsFirst
	if nilJobs.busy() || nilJobs.inFlight() {
		t.Fatal("a nil JobsFirst holds back")
	}
	nilJobs.begin()()

	j := &JobsFirst{}
	start := time.Now()
	if err := j.Wait(ctx); err != nil || time.Since(start) > freshPoll {
		t.Fatalf("Wait without a first pass took %s (%v)", time.Since(start), err)
	}

	end := j.begin()
	if !j.inFlight() || !j.busy() {
		t.Fatal("a first pass in flight does not hold back")
	}
	released := make(chan time.Time, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		released <- time.Now()
		end()
	}()
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	at := <-released
	if waited := time.Since(at); waited < jobsFirstQuiet {
		t.Errorf("Wait returned %s after the last first pass, want at least the quiet of %s", waited, jobsFirstQuiet)
	}
	if j.inFlight() {
		t.Error("still in flight after the first pass ended")
	}

	defer j.begin()()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if err := j.Wait(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with a first pass in flight and an ending context: %v, want the context's error", err)
	}
}
