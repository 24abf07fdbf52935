// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package tools pins the GPU feature discovery this module builds.
package tools

import (
	_ "github.com/NVIDIA/k8s-device-plugin/cmd/gpu-feature-discovery"
)
