// SPDX-License-Identifier: Apache-2.0

package gitsource

import (
	"net/url"
	"strings"
)

// scpToSSH turns Git's scp-like form, user@host:path, into the ssh:// URL
// it stands for; anything else is returned as it is.
func scpToSSH(raw string) string {
	if strings.Contains(raw, "://") {
		return raw
	}
	userHost, path, ok := strings.Cut(raw, ":")
	user, host, hasUser := strings.Cut(userHost, "@")
	if !ok || !hasUser || user == "" || host == "" || path == "" || strings.ContainsAny(userHost, "/") {
		return raw
	}
	return "ssh://" + user + "@" + host + "/" + strings.TrimPrefix(path, "/")
}

// Redact removes any credentials from a URL: a password, and over HTTP(S)
// the user too, which is often a token (https://TOKEN@host/...). An SSH
// URL keeps its user (git@), which is not a secret. Something that is not
// a URL loses whatever stands before an @.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable URL>"
	}
	if u.User != nil {
		_, hasPassword := u.User.Password()
		if hasPassword || u.Scheme != "ssh" {
			u.User = url.User("redacted")
		}
	}
	out := u.String()
	if u.Scheme == "" || u.Host == "" {
		if i := strings.LastIndex(out, "@"); i >= 0 {
			out = "redacted" + out[i:]
		}
	}
	return out
}
