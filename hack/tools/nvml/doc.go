// SPDX-License-Identifier: Apache-2.0

// Command nvml, built with -buildmode=c-shared as libnvidia-ml.so.1, is a
// stand-in for the NVIDIA driver's NVML library on a machine without a
// GPU. Its answers come from go-nvml's own mock of a DGX A100
// (pkg/nvml/mock/dgxa100: eight A100-SXM4-40GB, driver 550.54.15): the
// device count, names, UUIDs, minor numbers, memory, PCI bus IDs, brand,
// architecture, CUDA compute capability and MIG mode; and, as nvml.h
// says a driver does, no MIG devices on a GPU whose MIG mode is off (the
// mock defines none in MIG mode: there it is not supported). Every other NVML
// function returns NVML_ERROR_NOT_SUPPORTED, as a driver does for what a
// GPU lacks (zz_stubs.c, generated from go-nvml's nvml.h).
//
// The mock gives each device a random UUID; a GPU's UUID is fixed, and the
// kubelet tracks devices by it, so the stand-in derives each from the
// host's name and the device's index instead. That is one answer that
// is not the mock's. The other is topology, which the mock does not
// define: every two GPUs are answered as far apart as two devices of one
// machine can be (NVML_TOPOLOGY_SYSTEM), so the device plugin's aligned
// allocation of several GPUs prefers none over another.
//
// Beside it, libcuda is the CUDA stand-in a driver root holds with it, and
// machine describes the mock for what must agree with it outside the
// library: the driver version both libraries are named by, as a driver
// names its own, and the GPUs' PCI devices.
//
// Build: CGO_CFLAGS=-I<go-nvml>/pkg/nvml go build -buildmode=c-shared.
package main

//go:generate go run ./gen -out zz_stubs.c
