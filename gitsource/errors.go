// SPDX-License-Identifier: Apache-2.0

package gitsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	fluxknownhosts "github.com/fluxcd/pkg/ssh/knownhosts"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// The kinds of fetch failure, for errors.Is.
var (
	ErrAuthentication = errors.New("authentication failed")
	ErrRefNotFound    = errors.New("ref not found")
	ErrUnreachable    = errors.New("repository unreachable")
	ErrTimeout        = errors.New("timed out")
	ErrHostKey        = errors.New("SSH host key verification failed")

	errRefNotFound = ErrRefNotFound
)

// Error is a failed fetch. Its message names the repository (without
// credentials) and what went wrong, never a secret.
type Error struct {
	// Kind is one of the Err* values above, or nil when unclassified.
	Kind error
	op   string
	repo string
	msg  string
}

func (e *Error) Error() string {
	if e.Kind != nil {
		return fmt.Sprintf("git %s %s: %v: %s", e.op, e.repo, e.Kind, e.msg)
	}
	return fmt.Sprintf("git %s %s: %s", e.op, e.repo, e.msg)
}

// Is matches the kind.
func (e *Error) Is(target error) bool { return e.Kind != nil && e.Kind == target }

// Reason is a CamelCase word for the kind, for metrics and conditions.
func (e *Error) Reason() string {
	switch e.Kind {
	case ErrAuthentication:
		return "AuthenticationFailed"
	case ErrRefNotFound:
		return "RefNotFound"
	case ErrUnreachable:
		return "Unreachable"
	case ErrTimeout:
		return "Timeout"
	case ErrHostKey:
		return "HostKeyMismatch"
	}
	return "FetchFailed"
}

func (s *Source) classify(op string, err error) error {
	e := &Error{op: op, repo: s.String(), msg: sanitize(err, s.opts.Auth).Error()}
	var kerr *knownhosts.KeyError
	var nerr net.Error
	msg := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err):
		e.Kind, e.msg = ErrTimeout, fmt.Sprintf("no answer within %s", s.opts.Timeout)
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed),
		// x/crypto/ssh has no error type for a refused client key.
		strings.Contains(msg, "ssh: unable to authenticate"):
		e.Kind, e.msg = ErrAuthentication, "the server refused the credentials: check the username, password/token or SSH key"
	case errors.As(err, &kerr):
		e.Kind, e.msg = ErrHostKey, "the server's host key is not in known_hosts (or differs from it): check known_hosts; a changed key may mean someone is impersonating the server"
	case errors.Is(err, plumbing.ErrReferenceNotFound), errors.Is(err, git.NoMatchingRefSpecError{}), errors.Is(err, errRefNotFound):
		e.Kind, e.msg = ErrRefNotFound, fmt.Sprintf("%s does not exist in the repository", s.opts.Ref.RefLabel())
	case errors.Is(err, transport.ErrRepositoryNotFound), errors.As(err, &nerr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		e.Kind = ErrUnreachable
	}
	return e
}

// sanitize removes credentials from an error's text.
func sanitize(err error, a Auth) error {
	msg := err.Error()
	for _, secret := range []string{a.Password, a.SSHPassphrase} {
		if len(secret) >= 3 {
			msg = strings.ReplaceAll(msg, secret, "<redacted>")
		}
	}
	return errors.New(msg)
}

// knownHostsCallback verifies host keys against known_hosts content, read
// from memory (fluxcd/pkg/ssh's parser, as Flux's source-controller).
func knownHostsCallback(content []byte) (func(string, net.Addr, ssh.PublicKey) error, error) {
	cb, _, err := fluxknownhosts.New(content)
	if err != nil {
		return nil, fmt.Errorf("known_hosts: %w", err)
	}
	return cb, nil
}
