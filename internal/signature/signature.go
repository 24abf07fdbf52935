// SPDX-License-Identifier: Apache-2.0

// Package signature signs and checks webhook payloads with HMAC-SHA256, in
// the "sha256=<hex>" form GitHub sends in X-Hub-Signature-256.
package signature

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// GitHub's webhook headers.
const (
	HeaderGitHubSignature = "X-Hub-Signature-256"
	HeaderGitHubEvent     = "X-GitHub-Event"
)

// Verify checks a "sha256=<hex>" HMAC-SHA256 signature of body in constant
// time.
func Verify(secret, body []byte, signature string) bool {
	ok, _ := VerifyReader(secret, bytes.NewReader(body), signature)
	return ok
}

// VerifyReader checks a "sha256=<hex>" HMAC-SHA256 signature of what body
// holds, hashing it as it is read: the body is never held in memory. A
// signature that is not of that form is refused before body is read. The
// error is body's own (too large, cut short).
func VerifyReader(secret []byte, body io.Reader, signature string) (bool, error) {
	hexSig, ok := strings.CutPrefix(signature, "sha256=")
	if !ok || len(hexSig) != 2*sha256.Size {
		return false, nil
	}
	want, err := hex.DecodeString(hexSig)
	if err != nil {
		return false, nil
	}
	m := hmac.New(sha256.New, secret)
	if _, err := io.Copy(m, body); err != nil {
		return false, err
	}
	return hmac.Equal(want, m.Sum(nil)), nil
}

// Sign is the "sha256=<hex>" signature of body.
func Sign(secret, body []byte) string {
	return "sha256=" + hex.EncodeToString(mac(secret, body))
}

func mac(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return m.Sum(nil)
}

// PushRequest is a push notification for refs/heads/main as GitHub sends
// it to url: the event header and the body's signature with secret.
func PushRequest(url string, secret []byte) (*http.Request, error) {
	body := `{"ref":"refs/heads/main"}`
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set(HeaderGitHubSignature, Sign(secret, []byte(body)))
	req.Header.Set(HeaderGitHubEvent, "push")
	return req, nil
}

// Push sends PushRequest to url and expects the webhook's answer to an
// accepted push (202).
func Push(url string, secret []byte) error {
	req, err := PushRequest(url, secret)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("webhook %s: %s", url, resp.Status)
	}
	return nil
}
