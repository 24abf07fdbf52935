// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package tools pins the runc hack/build-node.sh builds (with cgo and
// libseccomp, as runc's own release builds are).
package tools

import _ "github.com/opencontainers/runc"
