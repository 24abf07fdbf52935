// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package tools pins the NVIDIA Container Toolkit programs
// hack/build-node.sh builds for the real node: the toolkit container's
// installer (nvidia-toolkit), the runtime in its three modes and its hook,
// nvidia-ctk and nvidia-cdi-hook.
package tools

import (
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook"
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime"
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime-hook"
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime.cdi"
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime.legacy"
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk"
	_ "github.com/NVIDIA/nvidia-container-toolkit/tools/container/nvidia-toolkit"
)
