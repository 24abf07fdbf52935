// Package signature signs and checks webhook payloads with HMAC-SHA256, in
// the "sha256=<hex>" form GitHub sends in X-Hub-Signature-256.
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Verify checks a "sha256=<hex>" HMAC-SHA256 signature of body in constant
// time.
func Verify(secret, body []byte, signature string) bool {
	hexSig, ok := strings.CutPrefix(signature, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	return hmac.Equal(got, mac(secret, body))
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
