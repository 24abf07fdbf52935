package gitops

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"

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
		{"generic hmac", "POST", map[string]string{HeaderGenericSignature: signature.Sign(secret, []byte(body))}, body, 202, true},
		{"unsigned", "POST", nil, body, 401, false},
		{"GET", "GET", nil, "", 405, false},
		{"too large", "POST", map[string]string{HeaderGitHubSignature: "sha256=00"}, strings.Repeat("x", MaxWebhookBody+1), 413, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synced := 0
			w := &Webhook{Secret: secret, Log: logr.Discard(), Request: func(context.Context) error { synced++; return nil }}
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

func TestWebhookWithoutSecretRefusesEverything(t *testing.T) {
	w := &Webhook{Log: logr.Discard(), Request: func(context.Context) error { t.Fatal("synced"); return nil }}
	req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader("{}"))
	req.Header.Set(HeaderGitHubSignature, signature.Sign(nil, []byte("{}")))
	rec := httptest.NewRecorder()
	w.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("code %d", rec.Code)
	}
}
