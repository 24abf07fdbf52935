// SPDX-License-Identifier: Apache-2.0

package notify

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Bounds on delivery: a forge that does not answer holds one call for
// callTimeout; a status is retried with doubling waits from firstRetry up
// to maxRetryWait, and dropped after maxAttempts.
const (
	callTimeout  = 10 * time.Second
	firstRetry   = time.Second
	maxRetryWait = 5 * time.Minute
	maxAttempts  = 8
	// maxPending bounds the statuses waiting: past it the oldest is
	// dropped (a status is only news until the next one).
	maxPending = 1024
)

var metricStatuses = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "trainops_commit_statuses_total",
	Help: "Commit statuses posted to forges, by provider and result (posted, retried, dropped).",
}, []string{"provider", "result"})

func init() { metrics.Registry.MustRegister(metricStatuses) }

// Notifier posts commit statuses in the background. Post never blocks;
// of the statuses of one commit and context waiting, only the latest is
// sent; a status equal to the last one sent is not sent again.
type Notifier struct {
	// Client makes the calls (nil: a client with callTimeout).
	Client *http.Client
	Log    logr.Logger
	// now and after stand in for the clock in tests.
	now func() time.Time

	mu      sync.Mutex
	pending map[string]*item
	sent    map[string]Status // the last status sent, by key
	order   []string          // pending keys, oldest first
	wake    chan struct{}
}

// item is a status waiting to be sent to a target.
type item struct {
	target   Target
	status   Status
	attempts int
	due      time.Time
}

func key(t Target, st Status) string {
	return t.Provider + " " + t.API + " " + t.Repo + " " + t.Context + " " + st.Commit
}

func (n *Notifier) init() {
	if n.pending == nil {
		n.pending, n.sent = map[string]*item{}, map[string]Status{}
		n.wake = make(chan struct{}, 1)
	}
	if n.now == nil {
		n.now = time.Now
	}
}

// Post queues st for t's commit and returns at once.
func (n *Notifier) Post(t Target, st Status) {
	if st.Commit == "" {
		return
	}
	n.mu.Lock()
	n.init()
	k := key(t, st)
	if last, ok := n.sent[k]; ok && last == st {
		if _, waiting := n.pending[k]; !waiting {
			n.mu.Unlock()
			return
		}
	}
	if _, waiting := n.pending[k]; !waiting {
		n.order = append(n.order, k)
	}
	n.pending[k] = &item{target: t, status: st, due: n.now()}
	for len(n.order) > maxPending {
		old := n.order[0]
		n.order = n.order[1:]
		if it := n.pending[old]; it != nil {
			metricStatuses.WithLabelValues(it.target.Provider, "dropped").Inc()
		}
		delete(n.pending, old)
	}
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Start sends what is queued until ctx ends (a manager Runnable; every
// replica may post, but only the leader syncs).
func (n *Notifier) Start(ctx context.Context) error {
	n.mu.Lock()
	n.init()
	wake := n.wake
	n.mu.Unlock()
	for {
		wait := n.sendDue(ctx)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// NeedLeaderElection: statuses come from syncs, which only the leader
// makes; a follower has nothing queued.
func (n *Notifier) NeedLeaderElection() bool { return false }

// sendDue sends every status due, and returns how long until the next.
func (n *Notifier) sendDue(ctx context.Context) time.Duration {
	for {
		k, it := n.next()
		if it == nil {
			return n.untilNext()
		}
		err := n.send(ctx, it.target, it.status)
		n.mu.Lock()
		switch {
		case err == nil:
			n.sent[k] = it.status
			if cur := n.pending[k]; cur == it {
				n.remove(k)
			}
			metricStatuses.WithLabelValues(it.target.Provider, "posted").Inc()
		case it.attempts+1 >= maxAttempts:
			if cur := n.pending[k]; cur == it {
				n.remove(k)
			}
			metricStatuses.WithLabelValues(it.target.Provider, "dropped").Inc()
			n.Log.Info("commit status dropped after retries", "provider", it.target.Provider, "repository", it.target.Repo, "commit", it.status.Commit, "error", err.Error())
		default:
			if cur := n.pending[k]; cur == it {
				it.attempts++
				it.due = n.now().Add(min(firstRetry<<(it.attempts-1), maxRetryWait))
			}
			metricStatuses.WithLabelValues(it.target.Provider, "retried").Inc()
			n.Log.V(1).Info("commit status not posted; retrying", "provider", it.target.Provider, "repository", it.target.Repo, "commit", it.status.Commit, "error", err.Error())
		}
		n.mu.Unlock()
		if ctx.Err() != nil {
			return time.Second
		}
	}
}

// next is the oldest status due now, if any.
func (n *Notifier) next() (string, *item) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	for _, k := range n.order {
		if it := n.pending[k]; it != nil && !it.due.After(now) {
			return k, it
		}
	}
	return "", nil
}

// untilNext is how long until a status is due (an hour when none waits).
func (n *Notifier) untilNext() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	wait := time.Hour
	for _, it := range n.pending {
		wait = min(wait, it.due.Sub(n.now()))
	}
	return max(wait, 0)
}

func (n *Notifier) remove(k string) {
	delete(n.pending, k)
	for i, o := range n.order {
		if o == k {
			n.order = append(n.order[:i], n.order[i+1:]...)
			break
		}
	}
}

// send makes one call. Its error names the forge's answer, never the
// token.
func (n *Notifier) send(ctx context.Context, t Target, st Status) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := t.Request(ctx, st)
	if err != nil {
		return err
	}
	c := n.Client
	if c == nil {
		c = &http.Client{Timeout: callTimeout}
	}
	resp, err := c.Do(req)
	if err != nil {
		return redact(fmt.Errorf("post to %s: %w", t.API, err), t.Token)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return redact(fmt.Errorf("%s answered %s: %s", t.API, resp.Status, strings.TrimSpace(string(answer))), t.Token)
	}
	return nil
}

// redact takes token out of err's message.
func redact(err error, token string) error {
	if token == "" || !strings.Contains(err.Error(), token) {
		return err
	}
	return fmt.Errorf("%s", strings.ReplaceAll(err.Error(), token, "***"))
}
