// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/signature"
)

// Webhook headers.
const (
	HeaderGitHubSignature  = signature.HeaderGitHubSignature
	HeaderGitHubEvent      = signature.HeaderGitHubEvent
	HeaderGitLabToken      = "X-Gitlab-Token"
	HeaderGitLabEvent      = "X-Gitlab-Event"
	HeaderGenericSignature = "X-Trainops-Signature-256"
	// HeaderGiteaSignature is Gitea's HMAC-SHA256 of the body, in hex
	// without a prefix; HeaderGiteaEvent and HeaderGiteaDelivery are its
	// event and delivery.
	HeaderGiteaSignature = "X-Gitea-Signature"
	HeaderGiteaEvent     = "X-Gitea-Event"
	HeaderGiteaDelivery  = "X-Gitea-Delivery"
	// HeaderGitHubDelivery and HeaderGitLabDelivery identify one delivery;
	// a delivery seen before is not synced again.
	HeaderGitHubDelivery = "X-GitHub-Delivery"
	HeaderGitLabDelivery = "X-Gitlab-Event-UUID"
	// MaxWebhookBody bounds a push payload.
	MaxWebhookBody = 1 << 20
	// MaxWebhookChecks bounds the calls whose body is being read to check
	// its signature at once; more are answered 429 unread. Each holds at
	// most MaxWebhookBody, so held-open calls take bounded memory.
	MaxWebhookChecks = 16
	// maxWebhookHeader bounds a call's headers.
	maxWebhookHeader = 32 << 10
	// webhookBodyTimeout bounds the reading of a body being checked.
	webhookBodyTimeout = 10 * time.Second
)

// Webhook receives push notifications and asks for a sync of what follows
// the pushed repository and ref. It checks every call against the shared
// secret in constant time: Gitea's or GitHub's HMAC-SHA256 signature,
// GitLab's token, or the same HMAC in X-Trainops-Signature-256. The payload is parsed only
// once the call is verified.
type Webhook struct {
	Secret []byte
	// Request asks the leader for a sync of what follows the push.
	Request func(ctx context.Context, push Push) error
	// GitSyncSecret, when set, is the secret of the GitSync namespace/name
	// (its spec.webhookSecretRef): a call to GitSyncHookPath+namespace/name
	// is checked against it, not the shared Secret, and asks through
	// RequestGitSync for a sync of that GitSync alone. An error (no such
	// GitSync, or no secret of its own) refuses the call as a wrong
	// signature would, saying nothing of which.
	GitSyncSecret  func(ctx context.Context, namespace, name string) ([]byte, error)
	RequestGitSync func(ctx context.Context, namespace, name string, push Push) error
	Log            logr.Logger
	// Addr is where Start listens.
	Addr string

	once   sync.Once
	checks chan struct{}
	seen   *deliveries
}

func (w *Webhook) init() {
	w.once.Do(func() {
		w.checks = make(chan struct{}, MaxWebhookChecks)
		w.seen = newDeliveries(4096)
	})
}

// NeedLeaderElection: every replica answers webhooks; Request starts the
// sync on the leader, or forwards the push to it through the inventory.
func (w *Webhook) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (w *Webhook) Start(ctx context.Context) error {
	l, err := net.Listen("tcp", w.Addr)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	srv := &http.Server{Handler: w, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, MaxHeaderBytes: maxWebhookHeader}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	w.Log.Info("webhook listening", "address", l.Addr().String())
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ServeHTTP checks a call and asks for a sync. Nothing of the body is read
// until a credential header of a known kind is there; a GitLab token is
// checked before the body is read; an HMAC is computed as the body streams
// in, bounded by MaxWebhookBody. The body is parsed only after the check.
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w.init()
	// Counted before the answer leaves (it is sent when ServeHTTP
	// returns): a caller that has its answer can read the count.
	result := "refused"
	defer func() { metricWebhook.WithLabelValues(result).Inc() }()
	if r.Method != http.MethodPost {
		http.Error(rw, "POST a push event here", http.StatusMethodNotAllowed)
		return
	}
	provider, header := credential(r)
	ns, name, own := gitSyncOf(r.URL.Path)
	if own && (w.GitSyncSecret == nil || w.RequestGitSync == nil) {
		http.NotFound(rw, r)
		return
	}
	if (!own && len(w.Secret) == 0) || header == "" {
		w.Log.Info("webhook refused: no signature or token", "remote", r.RemoteAddr)
		http.Error(rw, "invalid signature", http.StatusUnauthorized)
		return
	}
	select {
	case w.checks <- struct{}{}:
		defer func() { <-w.checks }()
	default:
		w.Log.Info("webhook refused: too many calls being checked", "remote", r.RemoteAddr)
		result = "busy"
		rw.Header().Set("Retry-After", "1")
		http.Error(rw, "too many calls being checked; retry", http.StatusTooManyRequests)
		return
	}
	secret, request := w.Secret, w.Request
	if own {
		// Looked up only with a check's slot held: calls without one
		// cannot make trainops read Secrets at will.
		s, err := w.GitSyncSecret(r.Context(), ns, name)
		if err != nil || len(s) == 0 {
			w.Log.Info("webhook refused: no secret of its own for this GitSync", "remote", r.RemoteAddr, "gitsync", ns+"/"+name)
			http.Error(rw, "invalid signature", http.StatusUnauthorized)
			return
		}
		secret = s
		request = func(ctx context.Context, push Push) error { return w.RequestGitSync(ctx, ns, name, push) }
	}
	// A sender that holds its body open keeps a check for at most this.
	_ = http.NewResponseController(rw).SetReadDeadline(time.Now().Add(webhookBodyTimeout))
	var ok bool
	var body bytes.Buffer
	var err error
	limited := http.MaxBytesReader(rw, r.Body, MaxWebhookBody)
	if provider == "gitlab" {
		if ok = subtle.ConstantTimeCompare([]byte(header), secret) == 1; ok {
			_, err = body.ReadFrom(limited)
		}
	} else {
		ok, err = signature.VerifyReader(secret, io.TeeReader(limited, &body), header)
	}
	if err != nil {
		w.Log.Info("webhook refused: body too large or unreadable", "remote", r.RemoteAddr)
		http.Error(rw, "payload too large", http.StatusRequestEntityTooLarge)
		return
	}
	if !ok {
		w.Log.Info("webhook refused: invalid signature", "remote", r.RemoteAddr, "provider", provider)
		http.Error(rw, "invalid signature", http.StatusUnauthorized)
		return
	}
	if !isPush(r) {
		result = "ignored"
		rw.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(rw, "event ignored: only pushes trigger a sync\n")
		return
	}
	if id := deliveryID(r); id != "" && !w.seen.add(id) {
		w.Log.Info("webhook: delivery already handled", "provider", provider, "delivery", id)
		result = "duplicate"
		rw.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(rw, "delivery already handled\n")
		return
	}
	push := ParsePush(body.Bytes())
	if err := request(r.Context(), push); err != nil {
		w.Log.Error(err, "webhook: could not request a sync")
		result = "failed"
		http.Error(rw, "could not request a sync", http.StatusServiceUnavailable)
		return
	}
	w.Log.Info("webhook accepted: sync requested", "provider", provider, "repository", push.Repository(), "ref", push.Ref)
	result = "requested"
	rw.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(rw, "sync requested\n")
}

// GitSyncHookPath is where a GitSync with a webhook secret of its own gets
// its pushes: GitSyncHookPath + "<namespace>/<name>".
const GitSyncHookPath = "/hook/gitsync/"

// gitSyncOf is the GitSync a call's path names, if it names one.
func gitSyncOf(path string) (namespace, name string, ok bool) {
	rest, found := strings.CutPrefix(path, GitSyncHookPath)
	if !found {
		return "", "", false
	}
	namespace, name, _ = strings.Cut(rest, "/")
	return namespace, name, true
}

// credential is the call's provider and credential header: GitHub's
// signature, GitLab's token, or trainops's own signature.
func credential(r *http.Request) (provider, value string) {
	if v := r.Header.Get(HeaderGiteaSignature); v != "" {
		// Gitea also sends GitHub's header; its own is the one checked.
		return "gitea", "sha256=" + v
	}
	for _, c := range []struct{ provider, header string }{
		{"github", HeaderGitHubSignature},
		{"gitlab", HeaderGitLabToken},
		{"generic", HeaderGenericSignature},
	} {
		if v := r.Header.Get(c.header); v != "" {
			return c.provider, v
		}
	}
	return "unsigned", ""
}

// deliveryID is the provider's identifier of this delivery, if any.
func deliveryID(r *http.Request) string {
	if id := r.Header.Get(HeaderGiteaDelivery); id != "" {
		return "gitea/" + id
	}
	if id := r.Header.Get(HeaderGitHubDelivery); id != "" {
		return "github/" + id
	}
	if id := r.Header.Get(HeaderGitLabDelivery); id != "" {
		return "gitlab/" + id
	}
	return ""
}

// deliveries remembers the last n delivery IDs accepted.
type deliveries struct {
	mu    sync.Mutex
	n     int
	order []string
	set   map[string]struct{}
}

func newDeliveries(n int) *deliveries {
	return &deliveries{n: n, set: make(map[string]struct{}, n)}
}

// add records id and reports whether it is new.
func (d *deliveries) add(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.set[id]; ok {
		return false
	}
	if len(d.order) == d.n {
		delete(d.set, d.order[0])
		d.order = d.order[1:]
	}
	d.order = append(d.order, id)
	d.set[id] = struct{}{}
	return true
}

func isPush(r *http.Request) bool {
	if e := r.Header.Get(HeaderGiteaEvent); e != "" {
		return e == "push"
	}
	if e := r.Header.Get(HeaderGitHubEvent); e != "" {
		return e == "push"
	}
	if e := r.Header.Get(HeaderGitLabEvent); e != "" {
		return e == "Push Hook" || e == "Tag Push Hook"
	}
	return true
}

// InventoryRequester asks the leader for a sync by stamping the inventory,
// which the leader watches.
func InventoryRequester(c client.Client, e *Engine) func(context.Context) error {
	return func(ctx context.Context) error {
		cm := &corev1.ConfigMap{}
		cm.Namespace, cm.Name = e.inventory().key().Namespace, e.inventory().key().Name
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationSyncRequested, time.Now().UTC().Format(time.RFC3339Nano))
		err := c.Patch(ctx, cm, client.RawPatch("application/merge-patch+json", []byte(patch)))
		// No inventory yet: the leader's first sync, which it runs on
		// start, is still to come.
		return client.IgnoreNotFound(err)
	}
}
