// SPDX-License-Identifier: Apache-2.0

package notify

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// channelServer records the alerts posted to it, checking each generic
// body's signature against key.
type channelServer struct {
	key    string
	mu     sync.Mutex
	alerts []Alert
	slack  []slackMessage
	bad    int // bodies whose signature did not match
}

func (s *channelServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.key != "" {
		mac := hmac.New(sha256.New, []byte(s.key))
		mac.Write(body)
		if r.Header.Get(SignatureHeader) != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
			s.bad++
		}
	}
	var a Alert
	var m slackMessage
	if json.Unmarshal(body, &m) == nil && m.Username != "" {
		s.slack = append(s.slack, m)
	} else if json.Unmarshal(body, &a) == nil {
		s.alerts = append(s.alerts, a)
	}
}

func (s *channelServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.alerts) + len(s.slack)
}

// manualClock is a clock the test moves.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(n *Notifier, d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	select { // the sender sleeps in real time: wake it
	case n.wake <- struct{}{}:
	default:
	}
}

func startNotifier(t *testing.T, n *Notifier) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n.mu.Lock()
	n.init()
	n.mu.Unlock()
	go func() { _ = n.Start(ctx) }()
}

// TestAlertsAreRateLimitedMergedAndDeduplicated: a burst to one channel
// goes out at most alertBurst at once, then one each alertEvery; what
// waits merges by source (the latest kept); an alert equal to the last
// sent for its source is not sent again; generic bodies are signed.
func TestAlertsAreRateLimitedMergedAndDeduplicated(t *testing.T) {
	srv := &channelServer{key: "signing-key"}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	clock := &manualClock{now: time.Now()}
	n := &Notifier{Log: logr.Discard(), now: clock.Now}
	startNotifier(t, n)
	c, err := ChannelFor(Generic, hs.URL+"/hook", "signing-key")
	if err != nil {
		t.Fatal(err)
	}
	limited := testutil.ToFloat64(metricAlerts.WithLabelValues(Generic, "limited"))
	alert := func(source, msg string) Alert {
		return Alert{Source: source, Revision: "main@sha1:" + strings.Repeat("a", 40), State: Failure, Reason: "ValidationFailed", Message: msg}
	}
	sources := []string{"GitSync a/1", "GitSync a/2", "GitSync a/3", "GitSync a/4", "GitSync a/5", "GitSync a/6", "GitSync a/7", "GitSync a/8"}
	for _, s := range sources {
		n.Alert(c, alert(s, "first"))
	}
	waitFor(t, func() bool {
		return testutil.ToFloat64(metricAlerts.WithLabelValues(Generic, "limited"))-limited == float64(len(sources)-alertBurst)
	})
	if got := srv.count(); got != alertBurst {
		t.Fatalf("%d alerts sent in the burst, limit %d", got, alertBurst)
	}
	// A newer alert of a source that waits replaces its older one.
	n.Alert(c, alert(sources[7], "second"))
	// An alert equal to the last sent for its source is not queued.
	n.Alert(c, alert(sources[0], "first"))
	n.mu.Lock()
	_, queued := n.pending[alertMessage{channel: c, alert: alert(sources[0], "first")}.key()]
	n.mu.Unlock()
	if queued {
		t.Error("an alert equal to the last one sent was queued again")
	}
	clock.advance(n, alertEvery)
	waitFor(t, func() bool { return srv.count() == alertBurst+1 })
	clock.advance(n, 2*alertEvery)
	waitFor(t, func() bool { return srv.count() == len(sources) })
	srv.mu.Lock()
	defer srv.mu.Unlock()
	last := srv.alerts[len(srv.alerts)-1]
	if last.Source != sources[7] || last.Message != "second" {
		t.Errorf("the last alert sent is %+v: the waiting one was not replaced", last)
	}
	if srv.bad != 0 {
		t.Errorf("%d bodies without a valid %s", srv.bad, SignatureHeader)
	}
}

// TestSlackAlertShowsWhatARepositorySays: names and messages from a
// repository are escaped, so Slack shows <!channel> instead of notifying
// everyone.
func TestSlackAlertShowsWhatARepositorySays(t *testing.T) {
	srv := &channelServer{}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	n := &Notifier{Log: logr.Discard()}
	startNotifier(t, n)
	c, err := ChannelFor(Slack, hs.URL+"/services/T0/B0/x", "")
	if err != nil {
		t.Fatal(err)
	}
	n.Alert(c, Alert{Source: "GitSync ml/cfg", Revision: "main@sha1:" + strings.Repeat("b", 40), State: Failure, Reason: "ValidationFailed",
		Message: "ValidationFailed: jobs/<!channel>.yaml: PyJob ml/x: see <https://evil.example|docs> & more"})
	waitFor(t, func() bool { return srv.count() == 1 })
	srv.mu.Lock()
	m := srv.slack[0]
	srv.mu.Unlock()
	raw, _ := json.Marshal(m)
	if strings.Contains(string(raw), "<!channel>") || strings.Contains(string(raw), "<https://") {
		t.Errorf("Slack markup passed through: %s", raw)
	}
	if a := m.Attachments[0]; a.Color != "danger" || !strings.Contains(a.Text, "&lt;!channel&gt;") || !strings.Contains(m.Text, "main@bbbbbbb") {
		t.Errorf("message %+v", m)
	}
}

// TestAlertAddressIsNeverShown: a webhook's address holds its token; it
// is in no log line, whether the channel answers with an error quoting
// the request or cannot be reached, nor in ChannelFor's errors.
func TestAlertAddressIsNeverShown(t *testing.T) {
	const token = "T0000/B0000/XXXXsecretXXXX"
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such hook: "+r.URL.String(), http.StatusNotFound)
	}))
	defer echo.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	var mu sync.Mutex
	var logs strings.Builder
	n := &Notifier{Log: funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + args + "\n")
	}, funcr.Options{Verbosity: 1}), Client: &http.Client{Timeout: 2 * time.Second}}
	retried := testutil.ToFloat64(metricAlerts.WithLabelValues(Slack, "retried"))
	startNotifier(t, n)
	for i, base := range []string{echo.URL, closed} {
		c, err := ChannelFor(Slack, base+"/services/"+token, "")
		if err != nil {
			t.Fatal(err)
		}
		n.Alert(c, Alert{Source: "GitSync ml/cfg", Revision: "main", State: Success, Reason: "Applied", Message: "applied"})
		waitFor(t, func() bool {
			return testutil.ToFloat64(metricAlerts.WithLabelValues(Slack, "retried"))-retried >= float64(i+1)
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "retrying") || strings.Contains(logs.String(), "XXXXsecretXXXX") {
		t.Errorf("the log does not say it retried, or shows the address:\n%s", logs.String())
	}
	for _, addr := range []string{"ftp://hooks.example/" + token, "https://user:XXXXsecretXXXX@hooks.example/x", "hooks.example/" + token} {
		if _, err := ChannelFor(Slack, addr, ""); err == nil || strings.Contains(err.Error(), "XXXXsecretXXXX") {
			t.Errorf("ChannelFor(%q): %v", addr, err)
		}
	}
}
