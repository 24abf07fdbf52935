// SPDX-License-Identifier: Apache-2.0

// Package gpuparity holds, in its tests, the GPU stack trainops builds to
// the NVIDIA GPU Operator's own manifests at GPUOperatorVersion and to
// mig-parted's own parser: what differs on purpose is listed, with why,
// in Differences.
package gpuparity

// GPUOperatorModule is the GPU Operator's source at its release v25.3.4,
// as the Go module proxy serves it (a pseudo-version: the proxy does not
// serve the release's tag).
const GPUOperatorModule = "github.com/NVIDIA/gpu-operator@v0.0.0-20250917190837-d73a0086a6ba"
