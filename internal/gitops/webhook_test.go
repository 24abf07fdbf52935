// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/trainops/trainops/internal/procmem"
	"github.com/trainops/trainops/internal/signature"
)

func TestWebhookChecksEveryCall(t *testing.T) {
	secret := []byte("webhook-shared-secret")
	body := `{"ref":"refs/heads/main"}`
	tests := []struct {
		name    string
		method  string
		headers map[string]string
		body    string
		code    int
		synced  bool
	}{
		{"github push", "POST", map[string]string{HeaderGitHubSignature: signature.Sign(secret, []byte(body)), HeaderGitHubEvent: "push"}, body, 202, true},
		{"github ping", "POST", map[string]string{HeaderGitHubSignature: signature.Sign(secret, []byte(body)), HeaderGitHubEvent: "ping"}, body, 200, false},
		{"github bad signature", "POST", map[string]string{HeaderGitHubSignature: signature.Sign([]byte("guess"), []byte(body)), HeaderGitHubEvent: "push"}, body, 401, false},
		{"github signature of another body", "POST", map[string]string{HeaderGitHubSignature: signature.Sign(secret, []byte("{}")), HeaderGitHubEvent: "push"}, body, 401, false},
		{"github malformed signature", "POST", map[string]string{HeaderGitHubSignature: "sha1=abc", HeaderGitHubEvent: "push"}, body, 401, false},
		{"gitlab push", "POST", map[string]string{HeaderGitLabToken: string(secret), HeaderGitLabEvent: "Push Hook"}, body, 202, true},
		{"gitlab wrong token", "POST", map[string]string{HeaderGitLabToken: "webhook-shared-secreT", HeaderGitLabEvent: "Push Hook"}, body, 401, false},
		{"gitlab issue event", "POST", map[string]string{HeaderGitLabToken: string(secret), HeaderGitLabEvent: "Issue Hook"}, body, 200, false},
		{"gitea push", "POST", map[string]string{HeaderGiteaSignature: giteaSign(secret, body), HeaderGiteaEvent: "push"}, body, 202, true},
		{"gitea create event", "POST", map[string]string{HeaderGiteaSignature: giteaSign(secret, body), HeaderGiteaEvent: "create", HeaderGitHubEvent: "push"}, body, 200, false},
		// Gitea sends GitHub's header too: its own signature is the one
		// checked, so a forged one is refused whatever the other says.
		{"gitea bad signature beside a good github one", "POST", map[string]string{HeaderGiteaSignature: giteaSign([]byte("guess"), body), HeaderGitHubSignature: signature.Sign(secret, []byte(body)), HeaderGiteaEvent: "push"}, body, 401, false},
		{"gitea prefixed signature", "POST", map[string]string{HeaderGiteaSignature: signature.Sign(secret, []byte(body)), HeaderGiteaEvent: "push"}, body, 401, false},
		{"generic hmac", "POST", map[string]string{HeaderGenericSignature: signature.Sign(secret, []byte(body))}, body, 202, true},
		{"unsigned", "POST", nil, body, 401, false},
		{"GET", "GET", nil, "", 405, false},
		{"too large", "POST", map[string]string{HeaderGitHubSignature: "sha256=" + strings.Repeat("00", 32)}, strings.Repeat("x", MaxWebhookBody+1), 413, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synced := 0
			w := &Webhook{Secret: secret, Log: logr.Discard(), Request: func(context.Context, Push) error { synced++; return nil }}
			req := httptest.NewRequest(tc.method, "/hook", strings.NewReader(tc.body))
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			w.ServeHTTP(rec, req)
			if rec.Code != tc.code || (synced == 1) != tc.synced {
				t.Fatalf("code %d synced %d, want %d %v", rec.Code, synced, tc.code, tc.synced)
			}
			if strings.Contains(rec.Body.String(), string(secret)) {
				t.Fatal("response leaks the secret")
			}
		})
	}
}

// giteaSign is the X-Gitea-Signature of body: the hex HMAC-SHA256 without
// a prefix, as Gitea's services/webhook/deliver.go writes it.
func giteaSign(secret []byte, body string) string {
	return strings.TrimPrefix(signature.Sign(secret, []byte(body)), "sha256=")
}

func TestWebhookWithoutSecretRefusesEverything(t *testing.T) {
	w := &Webhook{Log: logr.Discard(), Request: func(context.Context, Push) error { t.Fatal("synced"); return nil }}
	req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader("{}"))
	req.Header.Set(HeaderGitHubSignature, signature.Sign(nil, []byte("{}")))
	rec := httptest.NewRecorder()
	w.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("code %d", rec.Code)
	}
}

// countingBody records how much of a body was read.
type countingBody struct {
	r    io.Reader
	read int
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}

func (c *countingBody) Close() error { return nil }

// TestWebhookReadsNoBodyUnchecked: without a credential header of a known
// kind, with a malformed signature, or with a wrong GitLab token (checked
// from the header alone), not one byte of the body is read.
func TestWebhookReadsNoBodyUnchecked(t *testing.T) {
	secret := []byte("webhook-shared-secret")
	for name, headers := range map[string]map[string]string{
		"unsigned":            nil,
		"unknown header":      {"X-Signature": "sha256=" + strings.Repeat("ab", 32)},
		"malformed signature": {HeaderGitHubSignature: "sha1=abc"},
		"wrong gitlab token":  {HeaderGitLabToken: "guess"},
	} {
		t.Run(name, func(t *testing.T) {
			w := &Webhook{Secret: secret, Log: logr.Discard(), Request: func(context.Context, Push) error { return nil }}
			body := &countingBody{r: strings.NewReader(strings.Repeat("x", 4096))}
			req := httptest.NewRequest(http.MethodPost, "/hook", nil)
			req.Body = body
			for k, v := range headers {
				req.Header.Set(k, v)
			}
			w.ServeHTTP(httptest.NewRecorder(), req)
			if body.read != 0 {
				t.Fatalf("%d bytes of the body were read", body.read)
			}
		})
	}
}

// TestWebhookDeliveriesSyncOnce: a delivery replayed, by GitHub's or
// GitLab's ID, syncs once.
func TestWebhookDeliveriesSyncOnce(t *testing.T) {
	secret := []byte("webhook-shared-secret")
	body := `{"ref":"refs/heads/main"}`
	synced := 0
	w := &Webhook{Secret: secret, Log: logr.Discard(), Request: func(context.Context, Push) error { synced++; return nil }}
	send := func(headers map[string]string) int {
		req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		w.ServeHTTP(rec, req)
		return rec.Code
	}
	gh := map[string]string{HeaderGitHubSignature: signature.Sign(secret, []byte(body)), HeaderGitHubEvent: "push", HeaderGitHubDelivery: "72d3162e-cc78-11e3-81ab-4c9367dc0958"}
	gl := map[string]string{HeaderGitLabToken: string(secret), HeaderGitLabEvent: "Push Hook", HeaderGitLabDelivery: "13792a34-cac6-4fda-95a8-c58e00a3954e"}
	for i, h := range []map[string]string{gh, gh, gl, gl, gh} {
		code := send(h)
		if want := map[bool]int{true: 202, false: 200}[i == 0 || i == 2]; code != want {
			t.Errorf("call %d: code %d, want %d", i, code, want)
		}
	}
	if synced != 2 {
		t.Fatalf("%d syncs for two deliveries", synced)
	}
	// A different delivery of the same push syncs.
	gh[HeaderGitHubDelivery] = "another"
	if send(gh) != 202 || synced != 3 {
		t.Fatalf("a new delivery: synced %d", synced)
	}
}

// TestWebhookHeldOpenBodiesCostBoundedMemory holds 800 calls open on a
// real listener on 127.0.0.1, each with a signature header and nearly
// 1 MB of a body it never finishes. Only MaxWebhookChecks are read, as
// they stream, the rest are answered 429 unread; the process grows by
// less than 96 MiB (buffering each body, as trainops once did, took
// 800 MB), and no sync is asked for.
func TestWebhookHeldOpenBodiesCostBoundedMemory(t *testing.T) {
	var synced atomic.Int64
	w := &Webhook{Secret: []byte("webhook-shared-secret"), Log: logr.Discard(), Addr: "127.0.0.1:0",
		Request: func(context.Context, Push) error { synced.Add(1); return nil }}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var tooMany, entered atomic.Int64
	counted := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		rec := &statusRecorder{ResponseWriter: rw}
		w.ServeHTTP(rec, r)
		if rec.code == http.StatusTooManyRequests {
			tooMany.Add(1)
		}
	})
	srv := &http.Server{Handler: counted, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: maxWebhookHeader}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	const calls = 800
	payload := make([]byte, MaxWebhookBody-1)
	head := fmt.Sprintf("POST /hook HTTP/1.1\r\nHost: x\r\n%s: sha256=%s\r\nContent-Length: %d\r\n\r\n", HeaderGitHubSignature, strings.Repeat("ab", 32), MaxWebhookBody)
	var conns []net.Conn
	var sent atomic.Int64
	grew, err := procmem.PeakGrowthKiB(func() {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", l.Addr().String())
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				if _, err := c.Write([]byte(head)); err != nil {
					return
				}
				sent.Add(1)
				_, _ = c.Write(payload) // the last byte never comes
			}()
		}
		wg.Wait()
		// Every call sent is in the handler, and has been refused unless
		// it holds a check.
		deadline := time.Now().Add(15 * time.Second)
		for (entered.Load() < sent.Load() || entered.Load()-tooMany.Load() > MaxWebhookChecks) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	})
	for _, c := range conns {
		_ = c.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls held open, %d reached the handler: %d answered 429, the process grew by %d MiB", sent.Load(), entered.Load(), tooMany.Load(), grew>>10)
	if grew > 96<<10 {
		t.Errorf("the process grew by %d MiB", grew>>10)
	}
	if n := entered.Load(); n < calls/2 {
		t.Fatalf("only %d of %d calls reached the handler: the test proves too little", n, calls)
	}
	if read := entered.Load() - tooMany.Load(); read > MaxWebhookChecks {
		t.Errorf("%d calls had their bodies read, more than %d", read, MaxWebhookChecks)
	}
	if synced.Load() != 0 {
		t.Error("a sync was asked for")
	}
}

// statusRecorder notes the status a handler answers.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
