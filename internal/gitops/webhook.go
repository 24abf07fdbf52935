package gitops

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/trainops/trainops/internal/signature"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Webhook headers.
const (
	HeaderGitHubSignature  = signature.HeaderGitHubSignature
	HeaderGitHubEvent      = signature.HeaderGitHubEvent
	HeaderGitLabToken      = "X-Gitlab-Token"
	HeaderGitLabEvent      = "X-Gitlab-Event"
	HeaderGenericSignature = "X-Trainops-Signature-256"
	// MaxWebhookBody bounds a push payload.
	MaxWebhookBody = 1 << 20
)

// Webhook receives push notifications and asks for a sync. It checks every
// call against the shared secret in constant time: GitHub's HMAC-SHA256
// signature, GitLab's token, or the same HMAC in X-Trainops-Signature-256.
type Webhook struct {
	Secret []byte
	// Request asks the leader for a sync.
	Request func(ctx context.Context) error
	Log     logr.Logger
	// Addr is where Start listens.
	Addr string
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
	srv := &http.Server{Handler: w, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second}
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

func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(rw, "POST a push event here", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, MaxWebhookBody))
	if err != nil {
		w.Log.Info("webhook refused: body too large or unreadable", "remote", r.RemoteAddr)
		http.Error(rw, "payload too large", http.StatusRequestEntityTooLarge)
		return
	}
	provider, ok := w.verify(r, body)
	if !ok {
		w.Log.Info("webhook refused: missing or invalid signature", "remote", r.RemoteAddr, "provider", provider)
		http.Error(rw, "invalid signature", http.StatusUnauthorized)
		return
	}
	if !isPush(r) {
		rw.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(rw, "event ignored: only pushes trigger a sync\n")
		return
	}
	if err := w.Request(r.Context()); err != nil {
		w.Log.Error(err, "webhook: could not request a sync")
		http.Error(rw, "could not request a sync", http.StatusServiceUnavailable)
		return
	}
	w.Log.Info("webhook accepted: sync requested", "provider", provider)
	rw.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(rw, "sync requested\n")
}

// verify checks the call's credentials; it says which provider's scheme it
// used.
func (w *Webhook) verify(r *http.Request, body []byte) (string, bool) {
	if len(w.Secret) == 0 {
		return "none", false
	}
	if sig := r.Header.Get(HeaderGitHubSignature); sig != "" {
		return "github", signature.Verify(w.Secret, body, sig)
	}
	if tok := r.Header.Get(HeaderGitLabToken); tok != "" {
		return "gitlab", subtle.ConstantTimeCompare([]byte(tok), w.Secret) == 1
	}
	if sig := r.Header.Get(HeaderGenericSignature); sig != "" {
		return "generic", signature.Verify(w.Secret, body, sig)
	}
	return "unsigned", false
}

func isPush(r *http.Request) bool {
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
