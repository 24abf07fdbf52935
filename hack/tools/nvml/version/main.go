// SPDX-License-Identifier: Apache-2.0

// Command version prints the driver version and the CUDA driver version
// of go-nvml's DGX A100 mock, the machine the NVML stand-in answers as:
// hack/build-node.sh names the stand-in driver's libraries by the first,
// as a driver names its own (libnvidia-ml.so.<version>), and builds the
// CUDA stand-in to report the second.
package main

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

func main() {
	s := dgxa100.New()
	fmt.Println(s.DriverVersion, s.CudaDriverVersion)
}
