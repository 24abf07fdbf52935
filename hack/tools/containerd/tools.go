// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package tools pins the containerd hack/build-node.sh builds: the daemon,
// its runc shim and ctr.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
