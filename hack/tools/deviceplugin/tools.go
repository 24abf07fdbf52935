// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package tools pins the NVIDIA device plugin this module builds.
package tools

import (
	_ "github.com/NVIDIA/k8s-device-plugin/cmd/nvidia-device-plugin"
)
