// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package tools pins the Node Feature Discovery this module builds.
package tools

import (
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-master"
	_ "sigs.k8s.io/node-feature-discovery/cmd/nfd-worker"
)
