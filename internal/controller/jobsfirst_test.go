// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"testing"
	"time"
)

// TestJobsFirstStepAside checks how the other kinds step aside: never
// without a first pass, while one is in flight and for the quiet after it,
// and for its bound at most in all, without ever waiting.
func TestJobsFirstStepAside(t *testing.T) {
	var nilJobs *JobsFirst
	if nilJobs.busy() || nilJobs.inFlight() {
		t.Fatal("a nil JobsFirst holds back")
	}
	if _, aside := nilJobs.stepAside("a", freshWait); aside {
		t.Fatal("a nil JobsFirst makes a reconcile step aside")
	}
	nilJobs.begin()()

	j := &JobsFirst{}
	if _, aside := j.stepAside("a", freshWait); aside {
		t.Fatal("stepped aside without a first pass")
	}
	end := j.begin()
	start := time.Now()
	after, aside := j.stepAside("a", freshWait)
	if !aside || after != jobsFirstQuiet {
		t.Fatalf("with a first pass in flight: aside %v, back after %s; want true, %s", aside, after, jobsFirstQuiet)
	}
	if took := time.Since(start); took > freshPoll {
		t.Errorf("stepAside took %s: it must not wait", took)
	}
	end()
	if _, aside := j.stepAside("a", freshWait); !aside {
		t.Error("did not step aside in the quiet right after the last first pass")
	}
	time.Sleep(jobsFirstQuiet + 5*time.Millisecond)
	if _, aside := j.stepAside("a", freshWait); aside {
		t.Error("stepped aside after the quiet")
	}

	// Bounded: a reconcile that has stepped aside for freshWait goes ahead
	// although first passes keep running.
	defer j.begin()()
	if _, aside := j.stepAside("b", freshWait); !aside {
		t.Fatal("did not step aside with a first pass in flight")
	}
	j.stepping.Store("b", time.Now().Add(-freshWait))
	if _, aside := j.stepAside("b", burstWait); !aside {
		t.Error("stepped aside for freshWait only, with burstWait as its bound")
	}
	if _, aside := j.stepAside("b", freshWait); aside {
		t.Error("stepped aside past freshWait")
	}
}
