// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package tools pins the registry hack/build-node.sh builds.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
