// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/trainops/trainops/internal/signature"
)

// TestWebhookOfOneGitSync: a call to a GitSync's own path is checked
// against that GitSync's secret alone and asks for a sync of it alone; the
// shared secret, another GitSync's secret, or a GitSync without a secret
// of its own get 401 and no sync; an unsigned call reads no Secret.
func TestWebhookOfOneGitSync(t *testing.T) {
	shared, own, other := []byte("shared-secret"), []byte("team-a-secret"), []byte("team-b-secret")
	body := `{"ref":"refs/heads/main"}`
	tests := []struct {
		name, path string
		headers    map[string]string
		code       int
		synced     string
	}{
		{"its own secret", "team-a/training", map[string]string{HeaderGitHubSignature: signature.Sign(own, []byte(body)), HeaderGitHubEvent: "push"}, 202, "team-a/training"},
		{"its own GitLab token", "team-a/training", map[string]string{HeaderGitLabToken: string(own), HeaderGitLabEvent: "Push Hook"}, 202, "team-a/training"},
		{"the shared secret", "team-a/training", map[string]string{HeaderGitHubSignature: signature.Sign(shared, []byte(body)), HeaderGitHubEvent: "push"}, 401, ""},
		{"the shared GitLab token", "team-a/training", map[string]string{HeaderGitLabToken: string(shared), HeaderGitLabEvent: "Push Hook"}, 401, ""},
		{"another GitSync's secret", "team-a/training", map[string]string{HeaderGitHubSignature: signature.Sign(other, []byte(body)), HeaderGitHubEvent: "push"}, 401, ""},
		{"a GitSync without a secret", "team-c/training", map[string]string{HeaderGitHubSignature: signature.Sign(shared, []byte(body)), HeaderGitHubEvent: "push"}, 401, ""},
		{"no GitSync named", "", map[string]string{HeaderGitHubSignature: signature.Sign(shared, []byte(body)), HeaderGitHubEvent: "push"}, 401, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var synced []string
			shared := 0
			w := &Webhook{Secret: []byte("shared-secret"), Log: logr.Discard(),
				Request: func(context.Context, Push) error { shared++; return nil },
				GitSyncSecret: func(_ context.Context, ns, name string) ([]byte, error) {
					switch ns + "/" + name {
					case "team-a/training":
						return own, nil
					case "team-b/training":
						return other, nil
					}
					return nil, errors.New("no webhook secret of its own")
				},
				RequestGitSync: func(_ context.Context, ns, name string, _ Push) error {
					synced = append(synced, ns+"/"+name)
					return nil
				}}
			req := httptest.NewRequest("POST", GitSyncHookPath+tc.path, strings.NewReader(body))
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			w.ServeHTTP(rec, req)
			if rec.Code != tc.code || strings.Join(synced, ",") != tc.synced || shared != 0 {
				t.Fatalf("code %d, synced %v and %d shared, want %d and %q", rec.Code, synced, shared, tc.code, tc.synced)
			}
			for _, s := range []string{"shared-secret", string(own), string(other)} {
				if strings.Contains(rec.Body.String(), s) {
					t.Fatal("the answer shows a secret")
				}
			}
		})
	}
	lookups := 0
	w := &Webhook{Log: logr.Discard(), GitSyncSecret: func(context.Context, string, string) ([]byte, error) { lookups++; return own, nil },
		RequestGitSync: func(context.Context, string, string, Push) error { t.Fatal("synced"); return nil }}
	rec := httptest.NewRecorder()
	w.ServeHTTP(rec, httptest.NewRequest("POST", GitSyncHookPath+"team-a/training", strings.NewReader(body)))
	if rec.Code != 401 || lookups != 0 {
		t.Fatalf("an unsigned call: code %d after %d Secret lookups, want 401 and none", rec.Code, lookups)
	}
}
