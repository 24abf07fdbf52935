// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"sync"
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
	// stepping holds when each reconcile now stepping aside first did
	// (by stepAside's key).
	stepping sync.Map
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

// burstWait bounds how long an SREAgent steps aside for a burst of first
// passes in all. Its Deployment, Role and bindings are a dozen writes, and
// its Deployment's pods as many again, which a push of thousands of PyJobs
// would otherwise interleave with their Jobs; an agent a minute late costs
// no GPU time. The ClusterPolicy waits freshWait at most: the Jobs' pods
// need its device plugin to be scheduled onto GPUs at all.
const burstWait = 2 * time.Minute

// stepAside reports whether the reconcile of key should step aside for a
// burst of first passes, and when to look again. It does not wait: the
// caller returns, and its worker is free. One reconcile steps aside for
// most at most in all, so a steady stream of new PyJobs cannot starve the
// other kinds.
func (j *JobsFirst) stepAside(key string, most time.Duration) (time.Duration, bool) {
	if j == nil {
		return 0, false
	}
	if !j.busy() {
		j.stepping.Delete(key)
		return 0, false
	}
	v, _ := j.stepping.LoadOrStore(key, time.Now())
	if time.Since(v.(time.Time)) >= most {
		j.stepping.Delete(key)
		return 0, false
	}
	return jobsFirstQuiet, true
}
