// SPDX-License-Identifier: Apache-2.0
//
// A stand-in for the NVIDIA driver's CUDA library, built as
// libcuda.so.<driver version> (soname libcuda.so.1) beside the NVML
// stand-in. NVIDIA's CDI spec generators (the device plugin's and the
// container toolkit's) find a driver's libraries, and its version, by its
// libcuda.so.<version>; a container given GPUs gets it mounted, as from a
// driver. There is no GPU behind it: it reports the CUDA driver version of
// the machine the NVML stand-in answers as (CUDA_DRIVER_VERSION, set at
// build), and initialising CUDA fails with CUDA_ERROR_NO_DEVICE.

typedef int CUresult;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_NO_DEVICE = 100,
};

CUresult cuInit(unsigned int flags) {
	(void)flags;
	return CUDA_ERROR_NO_DEVICE;
}

CUresult cuDriverGetVersion(int *version) {
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = CUDA_DRIVER_VERSION;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
	(void)count;
	return CUDA_ERROR_NOT_INITIALIZED;
}
