// SPDX-License-Identifier: Apache-2.0

// Package nvmltest holds, in its tests, the NVML stand-in to go-nvml's own
// DGX A100 mock, through go-nvml's own loader. It is a package of its own
// so that its test binary does not link the stand-in's functions itself:
// every call goes through the library file, as the device plugin's do.
package nvmltest
