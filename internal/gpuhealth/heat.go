// SPDX-License-Identifier: Apache-2.0

package gpuhealth

import (
	"fmt"
	"sync"
	"time"
)

// Heat remembers, per node, since when a GPU of it has read at or above
// the temperature bound, so that only a reading that stays there takes
// the node out of service: a GPU whose cooling works throttles itself
// below its slowdown temperature whatever it runs, so a tenant's own heat
// is a peak, and a failed cooler is what lasts. The zero value is ready
// and safe for concurrent use. It lives in memory: a restart or a new
// leader starts the wait again, which delays an action, never hastens it.
type Heat struct {
	mu    sync.Mutex
	since map[string]time.Time
}

// Sustained returns problems, a node's problems read at now, with its
// temperature problems acted on only once the node has read hot, pass
// after pass, for at least d; before that they are reported, saying when
// the node goes out. A pass without a temperature problem (a cool or
// unknown reading) starts the wait again.
func (h *Heat) Sustained(node string, problems []Problem, now time.Time, d time.Duration) []Problem {
	h.mu.Lock()
	defer h.mu.Unlock()
	hot := false
	for _, p := range problems {
		hot = hot || p.Cause == CauseTemperature
	}
	if !hot {
		delete(h.since, node)
		return problems
	}
	if h.since == nil {
		h.since = map[string]time.Time{}
	}
	since, ok := h.since[node]
	if !ok {
		since = now
		h.since[node] = now
	}
	out := make([]Problem, len(problems))
	for i, p := range problems {
		if p.Cause == CauseTemperature {
			// The message names when the wait began, not how long it has
			// lasted: the same reading gives the same message each pass.
			at := since.UTC().Format(time.RFC3339)
			if now.Sub(since) < d {
				p.Action = Report
				p.Message += fmt.Sprintf(" since %s: out of service if it stays there for remediation.gpuTemperatureFor %s", at, d)
			} else {
				p.Message += fmt.Sprintf(" since %s, longer than remediation.gpuTemperatureFor %s", at, d)
			}
		}
		out[i] = p
	}
	return out
}

// Retain forgets every node not in nodes (deleted, or no longer a GPU
// node).
func (h *Heat) Retain(nodes map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for n := range h.since {
		if !nodes[n] {
			delete(h.since, n)
		}
	}
}
