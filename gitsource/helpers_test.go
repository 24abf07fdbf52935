// SPDX-License-Identifier: Apache-2.0

package gitsource_test

import "golang.org/x/crypto/ssh"

func sshAuthorized(k ssh.PublicKey) []byte { return ssh.MarshalAuthorizedKey(k) }
