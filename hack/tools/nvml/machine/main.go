// SPDX-License-Identifier: Apache-2.0

// Command machine describes go-nvml's DGX A100 mock, the machine the NVML
// stand-in answers as, for what must agree with it outside the library.
// Its first line is the driver version and the CUDA driver version:
// hack/build-node.sh names the stand-in driver's libraries by the first,
// as a driver names its own (libnvidia-ml.so.<version>), and builds the
// CUDA stand-in to report the second. Its second line is the GPUs' memory
// in MiB and their name, which GPU feature discovery's labels report.
// Each line after is one GPU's PCI
// device as the kernel names it under /sys/bus/pci/devices, and its PCI
// device and vendor IDs (NVML's pciDeviceId): the test environment lays
// out those devices where the GPU's own code reads them.
package main

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

func main() {
	s := dgxa100.New()
	fmt.Println(s.DriverVersion, s.CudaDriverVersion)
	first := s.Devices[0].(*dgxa100.Device)
	fmt.Println(first.MemoryInfo.Total>>20, first.Name)
	for _, d := range s.Devices {
		gpu := d.(*dgxa100.Device)
		var domain, bus, dev uint
		if _, err := fmt.Sscanf(gpu.PciBusID, "%x:%x:%x.", &domain, &bus, &dev); err != nil {
			panic(fmt.Sprintf("the mock's bus ID %q: %v", gpu.PciBusID, err))
		}
		pci, ret := gpu.GetPciInfo()
		if ret != nvml.SUCCESS {
			panic(fmt.Sprintf("the mock's PCI info: %v", ret))
		}
		fmt.Printf("%04x:%02x:%02x.0 %#08x\n", domain, bus, dev, pci.PciDeviceId)
	}
}
