// SPDX-License-Identifier: Apache-2.0

package notify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
	// maxSent bounds the record of what was sent (one per commit and
	// context, or per source and channel): past it the record starts
	// again, at worst sending each key's message once more.
	maxSent = 4096
	// maxInFlight bounds the calls made at once. One destination has one
	// call at a time, so a forge or channel that never answers holds only
	// its own messages, not another team's.
	maxInFlight = 8
)

var metricStatuses = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "trainops_commit_statuses_total",
	Help: "Commit statuses posted to forges, by provider and result (posted, retried, dropped).",
}, []string{"provider", "result"})

func init() { metrics.Registry.MustRegister(metricStatuses) }

// message is one call the Notifier makes: a commit status, or an alert.
// Its dynamic type is comparable: a message equal to the last one sent
// under its key is not sent again.
type message interface {
	// key: of the messages of one key waiting, only the latest is sent.
	key() string
	// destination is what rate limits count against.
	destination() string
	// limit is how often messages may go to one destination: one every
	// every, bursts of burst (every 0: no limit).
	limit() (every time.Duration, burst int)
	provider() string
	metric() *prometheus.CounterVec
	request(ctx context.Context) (*http.Request, error)
	// secrets are taken out of every error (a token; a webhook's address,
	// and its path, which a server may quote alone).
	secrets() []string
	// logValues describe the message in a log line, without its secret.
	logValues() []any
}

// statusMessage is a commit status for a target.
type statusMessage struct {
	target Target
	status Status
}

func (m statusMessage) key() string         { return key(m.target, m.status) }
func (m statusMessage) destination() string { return m.target.API }
func (m statusMessage) limit() (time.Duration, int) {
	return 0, 0
}
func (m statusMessage) provider() string               { return m.target.Provider }
func (m statusMessage) metric() *prometheus.CounterVec { return metricStatuses }
func (m statusMessage) request(ctx context.Context) (*http.Request, error) {
	return m.target.Request(ctx, m.status)
}
func (m statusMessage) secrets() []string { return []string{m.target.Token} }
func (m statusMessage) logValues() []any {
	return []any{"provider", m.target.Provider, "repository", m.target.Repo, "commit", m.status.Commit}
}

// Notifier posts commit statuses and alerts in the background, up to
// maxInFlight calls at once and one per destination. Post never blocks; of the messages of one key waiting (a commit's status in one
// context; a source's alert to one channel), only the latest is sent; a
// message equal to the last one sent under its key is not sent again;
// alerts to one channel are rate limited, later ones waiting (and merging
// by key) rather than dropped.
type Notifier struct {
	// Client makes the calls (nil: a client with callTimeout).
	Client *http.Client
	Log    logr.Logger
	// now and after stand in for the clock in tests.
	now func() time.Time

	mu      sync.Mutex
	pending map[string]*item
	sent    map[string]message // the last message sent, by key
	order   []string           // pending keys, oldest first
	buckets map[string]*bucket // rate limits, by destination
	// flyingKeys and flyingTo hold the keys and destinations of the calls
	// in flight.
	flyingKeys, flyingTo map[string]bool
	wake                 chan struct{}
}

// item is a message waiting to be sent.
type item struct {
	msg      message
	attempts int
	due      time.Time
}

func key(t Target, st Status) string {
	return t.Provider + " " + t.API + " " + t.Repo + " " + t.Context + " " + st.Commit
}

func (n *Notifier) init() {
	if n.pending == nil {
		n.pending, n.sent, n.buckets = map[string]*item{}, map[string]message{}, map[string]*bucket{}
		n.flyingKeys, n.flyingTo = map[string]bool{}, map[string]bool{}
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
	n.queue(statusMessage{target: t, status: st})
}

// queue adds m, unless it is what was last sent under its key, and wakes
// the sender.
func (n *Notifier) queue(m message) {
	n.mu.Lock()
	n.init()
	k := m.key()
	if last, ok := n.sent[k]; ok && last == m {
		if _, waiting := n.pending[k]; !waiting {
			n.mu.Unlock()
			return
		}
	}
	if _, waiting := n.pending[k]; !waiting {
		n.order = append(n.order, k)
	}
	n.pending[k] = &item{msg: m, due: n.now()}
	for len(n.order) > maxPending {
		old := n.order[0]
		n.order = n.order[1:]
		if it := n.pending[old]; it != nil {
			it.msg.metric().WithLabelValues(it.msg.provider(), "dropped").Inc()
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

// Pending is how many messages wait to be sent (again).
func (n *Notifier) Pending() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.pending)
}

// NeedLeaderElection: statuses come from syncs, which only the leader
// makes; a follower has nothing queued.
func (n *Notifier) NeedLeaderElection() bool { return false }

// sendDue starts a call for every message due whose destination has
// none in flight, up to maxInFlight, and returns how long until the next
// is due; a call's end wakes the sender again.
func (n *Notifier) sendDue(ctx context.Context) time.Duration {
	for {
		k, it := n.next()
		if it == nil {
			return n.untilNext()
		}
		go func() {
			err := n.send(ctx, it.msg)
			n.settle(k, it, err)
			select {
			case n.wake <- struct{}{}:
			default:
			}
		}()
	}
}

// settle records what became of it's call, under key k.
func (n *Notifier) settle(k string, it *item, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := it.msg
	delete(n.flyingKeys, k)
	delete(n.flyingTo, m.destination())
	counter := m.metric().WithLabelValues(m.provider(), "posted")
	switch {
	case err == nil:
		if len(n.sent) >= maxSent {
			clear(n.sent)
		}
		n.sent[k] = m
		if cur := n.pending[k]; cur == it {
			n.remove(k)
		}
	case it.attempts+1 >= maxAttempts:
		if cur := n.pending[k]; cur == it {
			n.remove(k)
		}
		counter = m.metric().WithLabelValues(m.provider(), "dropped")
		n.Log.Info("notification dropped after retries", append(m.logValues(), "error", err.Error())...)
	default:
		if cur := n.pending[k]; cur == it {
			it.attempts++
			it.due = n.now().Add(min(firstRetry<<(it.attempts-1), maxRetryWait))
		}
		counter = m.metric().WithLabelValues(m.provider(), "retried")
		n.Log.V(1).Info("notification not posted; retrying", append(m.logValues(), "error", err.Error())...)
	}
	counter.Inc()
}

// next is the oldest message due now whose destination's rate limit lets
// it go, if any; one the limit holds back is due when the limit allows.
func (n *Notifier) next() (string, *item) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if len(n.flyingTo) >= maxInFlight {
		return "", nil
	}
	for _, k := range n.order {
		it := n.pending[k]
		if it == nil || it.due.After(now) || n.flyingKeys[k] || n.flyingTo[it.msg.destination()] {
			continue
		}
		every, burst := it.msg.limit()
		if every <= 0 {
			n.fly(k, it)
			return k, it
		}
		d := it.msg.destination()
		b := n.buckets[d]
		if b == nil {
			b = &bucket{tokens: float64(burst), at: now}
			n.buckets[d] = b
		}
		if wait := b.take(now, every, burst); wait > 0 {
			it.due = now.Add(wait)
			it.msg.metric().WithLabelValues(it.msg.provider(), "limited").Inc()
			continue
		}
		n.fly(k, it)
		return k, it
	}
	return "", nil
}

// fly marks k and its destination in flight.
func (n *Notifier) fly(k string, it *item) {
	n.flyingKeys[k], n.flyingTo[it.msg.destination()] = true, true
}

// bucket is a token bucket: burst tokens, one more every interval.
type bucket struct {
	tokens float64
	at     time.Time
}

// take takes a token at now, or says how long until one is there.
func (b *bucket) take(now time.Time, every time.Duration, burst int) time.Duration {
	if now.After(b.at) {
		b.tokens = min(float64(burst), b.tokens+float64(now.Sub(b.at))/float64(every))
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(every))
}

// untilNext is how long until a message is due (an hour when none
// waits). One whose key or destination has a call in flight waits for
// that call's end, which wakes the sender.
func (n *Notifier) untilNext() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	wait := time.Hour
	if len(n.flyingTo) >= maxInFlight {
		return wait
	}
	for k, it := range n.pending {
		if !n.flyingKeys[k] && !n.flyingTo[it.msg.destination()] {
			wait = min(wait, it.due.Sub(n.now()))
		}
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

// send makes one call. Its error names the answer, never the message's
// secret.
func (n *Notifier) send(ctx context.Context, m message) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := m.request(ctx)
	if err != nil {
		return redact(err, m.secrets()...)
	}
	c := n.Client
	if c == nil {
		c = &http.Client{Timeout: callTimeout}
	}
	host := req.URL.Scheme + "://" + req.URL.Host
	resp, err := c.Do(req)
	if err != nil {
		// Without the URL the client's error quotes: a webhook's address
		// is its secret.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return redact(fmt.Errorf("post to %s: %w", host, err), m.secrets()...)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return redact(fmt.Errorf("%s answered %s: %s", host, resp.Status, strings.TrimSpace(string(answer))), m.secrets()...)
	}
	return nil
}

// redact takes each secret out of err's message.
func redact(err error, secrets ...string) error {
	msg := err.Error()
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "***")
		}
	}
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}
