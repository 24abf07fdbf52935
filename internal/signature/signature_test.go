// SPDX-License-Identifier: Apache-2.0

package signature

import (
	"io"
	"strings"
	"testing"
)

func TestVerify(t *testing.T) {
	secret, body := []byte("s3cret"), []byte(`{"ref":"refs/heads/main"}`)
	good := Sign(secret, body)
	tests := []struct {
		name string
		sig  string
		want bool
	}{
		{"own signature", good, true},
		{"upper-case hex", "sha256=" + strings.ToUpper(strings.TrimPrefix(good, "sha256=")), true},
		{"other secret", Sign([]byte("guess"), body), false},
		{"other body", Sign(secret, []byte("{}")), false},
		{"sha1 prefix", "sha1=" + strings.TrimPrefix(good, "sha256="), false},
		{"no prefix", strings.TrimPrefix(good, "sha256="), false},
		{"not hex", "sha256=zz", false},
		{"truncated", good[:len(good)-2], false},
		{"empty", "", false},
	}
	for _, tc := range tests {
		if got := Verify(secret, body, tc.sig); got != tc.want {
			t.Errorf("%s: Verify = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func FuzzVerify(f *testing.F) {
	secret := []byte("fuzz-secret")
	f.Add([]byte(`{"ref":"refs/heads/main"}`), Sign(secret, []byte(`{"ref":"refs/heads/main"}`)))
	f.Add([]byte(""), "sha256=")
	f.Add([]byte("x"), "sha256=zz")
	f.Fuzz(func(t *testing.T, body []byte, sig string) {
		want := Sign(secret, body)
		if Verify(secret, body, sig) && !strings.EqualFold(sig, want) {
			t.Fatalf("accepted a signature %q that is not the body's", sig)
		}
		if !Verify(secret, body, want) {
			t.Fatal("refused the body's own signature")
		}
	})
}

func TestPushRequestIsSignedAsGitHubSendsIt(t *testing.T) {
	secret := []byte("s3cret")
	req, err := PushRequest("http://127.0.0.1:1/hook", secret)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	if req.Method != "POST" || req.Header.Get(HeaderGitHubEvent) != "push" || !Verify(secret, body, req.Header.Get(HeaderGitHubSignature)) {
		t.Fatalf("%s %v %q", req.Method, req.Header, body)
	}
}
