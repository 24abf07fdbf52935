// SPDX-License-Identifier: Apache-2.0

// The NVML functions the stand-in answers, with the driver library's C
// signatures (go-nvml's nvml.h), each asking main.go, which asks go-nvml's
// DGX A100 mock. A device handle is its index plus one.

#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "nvml.h"
#include "_cgo_export.h"

enum { S_DRIVER, S_NVML, S_UUID, S_NAME, S_BUSID };
enum { N_COUNT, N_CUDA, N_MINOR, N_INDEX, N_CC, N_BRAND, N_ARCH, N_MIG, N_MEMORY, N_PCIID };

static int indexOf(nvmlDevice_t d) { return (int)(uintptr_t)d.handle - 1; }

static nvmlDevice_t handleOf(int i) {
	nvmlDevice_t d;
	d.handle = (struct nvmlDevice_st *)(uintptr_t)(i + 1);
	return d;
}

static nvmlReturn_t number(nvmlDevice_t d, int what, unsigned long long *a, unsigned long long *b, unsigned long long *c) {
	return (nvmlReturn_t)trainopsNvmlNumbers(indexOf(d), what, a, b, c);
}

nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }

const char *nvmlErrorString(nvmlReturn_t result) {
	switch (result) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	default: return "Unknown Error";
	}
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
	return (nvmlReturn_t)trainopsNvmlString(-1, S_DRIVER, version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
	return (nvmlReturn_t)trainopsNvmlString(-1, S_NVML, version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
	unsigned long long v = 0;
	nvmlReturn_t r = (nvmlReturn_t)trainopsNvmlNumbers(-1, N_CUDA, &v, 0, 0);
	if (cudaDriverVersion) *cudaDriverVersion = (int)v;
	return r;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
	return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
	unsigned long long v = 0;
	nvmlReturn_t r = (nvmlReturn_t)trainopsNvmlNumbers(-1, N_COUNT, &v, 0, 0);
	if (deviceCount) *deviceCount = (unsigned int)v;
	return r;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
	unsigned int n = 0;
	nvmlDeviceGetCount_v2(&n);
	if (index >= n || !device) return NVML_ERROR_INVALID_ARGUMENT;
	*device = handleOf((int)index);
	return NVML_SUCCESS;
}

static nvmlReturn_t byString(const char *s, int busID, nvmlDevice_t *device) {
	if (!s || !device) return NVML_ERROR_INVALID_ARGUMENT;
	int i = trainopsNvmlIndexOf((char *)s, busID);
	if (i < 0) return NVML_ERROR_NOT_FOUND;
	*device = handleOf(i);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) { return byString(uuid, 0, device); }
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) { return byString(pciBusId, 1, device); }

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
	return (nvmlReturn_t)trainopsNvmlString(indexOf(device), S_UUID, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
	return (nvmlReturn_t)trainopsNvmlString(indexOf(device), S_NAME, name, length);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
	unsigned long long v = 0;
	nvmlReturn_t r = number(device, N_MINOR, &v, 0, 0);
	if (minorNumber) *minorNumber = (unsigned int)v;
	return r;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
	unsigned long long v = 0;
	nvmlReturn_t r = number(device, N_INDEX, &v, 0, 0);
	if (index) *index = (unsigned int)v;
	return r;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
	unsigned long long a = 0, b = 0;
	nvmlReturn_t r = number(device, N_CC, &a, &b, 0);
	if (major) *major = (int)a;
	if (minor) *minor = (int)b;
	return r;
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type) {
	unsigned long long v = 0;
	nvmlReturn_t r = number(device, N_BRAND, &v, 0, 0);
	if (type) *type = (nvmlBrandType_t)v;
	return r;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch) {
	unsigned long long v = 0;
	nvmlReturn_t r = number(device, N_ARCH, &v, 0, 0);
	if (arch) *arch = (nvmlDeviceArchitecture_t)v;
	return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
	unsigned long long t = 0, f = 0, u = 0;
	nvmlReturn_t r = number(device, N_MEMORY, &t, &f, &u);
	if (memory) {
		memory->total = t;
		memory->free = f;
		memory->used = u;
	}
	return r;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
	if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
	memset(pci, 0, sizeof(*pci));
	unsigned long long id = 0;
	nvmlReturn_t r = number(device, N_PCIID, &id, 0, 0);
	if (r != NVML_SUCCESS) return r;
	pci->pciDeviceId = (unsigned int)id;
	/* The mock's bus ID is in the legacy form; a driver fills the
	 * domain, bus and device, and the bus ID in both forms nvml.h gives. */
	char legacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
	r = (nvmlReturn_t)trainopsNvmlString(indexOf(device), S_BUSID, legacy, sizeof(legacy));
	if (r != NVML_SUCCESS) return r;
	if (sscanf(legacy, "%x:%x:%x.", &pci->domain, &pci->bus, &pci->device) != 3) return NVML_ERROR_UNKNOWN;
	snprintf(pci->busId, sizeof(pci->busId), NVML_DEVICE_PCI_BUS_ID_FMT, NVML_DEVICE_PCI_BUS_ID_FMT_ARGS(pci));
	snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, NVML_DEVICE_PCI_BUS_ID_FMT_ARGS(pci));
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
	unsigned long long a = 0, b = 0;
	nvmlReturn_t r = number(device, N_MIG, &a, &b, 0);
	if (currentMode) *currentMode = (unsigned int)a;
	if (pendingMode) *pendingMode = (unsigned int)b;
	return r;
}

/* nvml.h: "Returns zero if MIG is not supported or enabled." The mock
 * defines no count for a GPU in MIG mode: there it is not supported. */
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
	if (!count) return NVML_ERROR_INVALID_ARGUMENT;
	unsigned long long mode = 0;
	nvmlReturn_t r = number(device, N_MIG, &mode, 0, 0);
	if (r == NVML_ERROR_NOT_SUPPORTED) mode = NVML_DEVICE_MIG_DISABLE;
	else if (r != NVML_SUCCESS) return r;
	if (mode == NVML_DEVICE_MIG_ENABLE) return NVML_ERROR_NOT_SUPPORTED;
	*count = 0;
	return NVML_SUCCESS;
}

/* The mock defines no topology. Every two GPUs are answered as far apart
 * as two devices of one machine can be (across its CPUs): the device
 * plugin's aligned allocation then prefers no GPU over another, and claims
 * no closeness the mock does not describe. */
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuTopologyLevel_t *pathInfo) {
	unsigned long long n = 0;
	nvmlReturn_t r = number(device1, N_COUNT, &n, 0, 0);
	if (r != NVML_SUCCESS) return r;
	int a = indexOf(device1), b = indexOf(device2);
	if (!pathInfo || a < 0 || b < 0 || a >= (int)n || b >= (int)n) return NVML_ERROR_INVALID_ARGUMENT;
	*pathInfo = a == b ? NVML_TOPOLOGY_INTERNAL : NVML_TOPOLOGY_SYSTEM;
	return NVML_SUCCESS;
}
