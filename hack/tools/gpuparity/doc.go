// SPDX-License-Identifier: Apache-2.0

// Package gpuparity holds, in its tests, the GPU stack trainops builds to
// the NVIDIA GPU Operator's own manifests and code and to
// mig-parted's own parser: what differs on purpose is listed, with why,
// in Differences. The GPU Operator's source is builder.GPUOperatorModule.
package gpuparity

//go:generate go run ./upstreamgen -out zz_generated.upstream.go transformForRuntime applyMIGConfiguration handleDevicePluginConfig
