package controller

import (
	"context"
	"sync/atomic"
	"time"
)

// JobsFirst tracks the PyJob first passes (see createJob) so that the
// other kinds' reconcilers can let a burst of new PyJobs have its Jobs
// created before their own writes compete with them for the API server.
// The zero value is ready; a nil *JobsFirst never holds anyone back.
type JobsFirst struct {
	// due counts first passes in flight, and those waiting behind the
	// sync's gate.
	due atomic.Int32
	// last is when a first pass last began or ended (Unix nanoseconds).
	last atomic.Int64
}

// jobsFirstQuiet is how long no first pass may have run before the burst
// counts as over: between one first pass and the next a worker is briefly
// idle, and that is not the end of the burst.
const jobsFirstQuiet = 2 * freshPoll

// begin records a first pass (or one waiting behind the gate) until the
// returned func is called.
func (j *JobsFirst) begin() (end func()) {
	if j == nil {
		return func() {}
	}
	j.last.Store(time.Now().UnixNano())
	j.due.Add(1)
	return func() {
		j.last.Store(time.Now().UnixNano())
		j.due.Add(-1)
	}
}

// inFlight reports whether a first pass is in flight or due.
func (j *JobsFirst) inFlight() bool {
	return j != nil && j.due.Load() > 0
}

// busy reports whether a burst of first passes is under way.
func (j *JobsFirst) busy() bool {
	return j.inFlight() || (j != nil && time.Since(time.Unix(0, j.last.Load())) < jobsFirstQuiet)
}

// Wait returns once no burst of first passes is under way, after at most
// freshWait, or with ctx's error.
func (j *JobsFirst) Wait(ctx context.Context) error {
	deadline := time.Now().Add(freshWait)
	for j.busy() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(freshPoll):
		}
	}
	return nil
}
