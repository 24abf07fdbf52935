// SPDX-License-Identifier: Apache-2.0

package main

// #include <stdint.h>
import "C"

import (
	"crypto/sha256"
	"fmt"
	"os"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

func main() {}

// server is the mock machine every answer comes from.
var server = newServer()

func newServer() *dgxa100.Server {
	s := dgxa100.New()
	host, _ := os.Hostname()
	for i, d := range s.Devices {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", host, i)))
		d.(*dgxa100.Device).UUID = fmt.Sprintf("GPU-%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	}
	return s
}

// device is the mock's device of index i, or nil.
func device(i C.int) nvml.Device {
	n, _ := server.DeviceGetCount()
	if i < 0 || int(i) >= n {
		return nil
	}
	d, _ := server.DeviceGetHandleByIndex(int(i))
	return d
}

// copyString writes s, NUL-terminated, into buf of size n: the NVML
// convention, INSUFFICIENT_SIZE when it does not fit.
func copyString(s string, buf *C.char, n C.uint) C.int {
	if buf == nil {
		return C.int(nvml.ERROR_INVALID_ARGUMENT)
	}
	if uint(len(s))+1 > uint(n) {
		return C.int(nvml.ERROR_INSUFFICIENT_SIZE)
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	copy(dst, s)
	dst[len(s)] = 0
	return C.int(nvml.SUCCESS)
}

// The strings a caller may ask of the machine or of a device.
const (
	stringDriverVersion = iota
	stringNVMLVersion
	stringUUID
	stringName
	stringBusID
)

//export trainopsNvmlString
func trainopsNvmlString(index, what C.int, buf *C.char, n C.uint) C.int {
	var s string
	var ret nvml.Return
	switch what {
	case stringDriverVersion:
		s, ret = server.SystemGetDriverVersion()
	case stringNVMLVersion:
		s, ret = server.SystemGetNVMLVersion()
	default:
		d := device(index)
		if d == nil {
			return C.int(nvml.ERROR_INVALID_ARGUMENT)
		}
		switch what {
		case stringUUID:
			s, ret = d.GetUUID()
		case stringName:
			s, ret = d.GetName()
		case stringBusID:
			s, ret = d.(*dgxa100.Device).PciBusID, nvml.SUCCESS
		}
	}
	if ret != nvml.SUCCESS {
		return C.int(ret)
	}
	return copyString(s, buf, n)
}

// The numbers a caller may ask of the machine or of a device.
const (
	numberDeviceCount = iota
	numberCudaDriverVersion
	numberMinor
	numberIndex
	numberComputeCapability
	numberBrand
	numberArchitecture
	numberMigMode
	numberMemory
	numberPciDeviceID
)

//export trainopsNvmlNumbers
func trainopsNvmlNumbers(index, what C.int, a, b, c *C.ulonglong) C.int {
	var x, y, z int
	var ret nvml.Return
	switch what {
	case numberDeviceCount:
		x, ret = server.DeviceGetCount()
	case numberCudaDriverVersion:
		x, ret = server.SystemGetCudaDriverVersion()
	default:
		d := device(index)
		if d == nil {
			return C.int(nvml.ERROR_INVALID_ARGUMENT)
		}
		switch what {
		case numberMinor:
			x, ret = d.GetMinorNumber()
		case numberIndex:
			x, ret = d.GetIndex()
		case numberComputeCapability:
			x, y, ret = d.GetCudaComputeCapability()
		case numberBrand:
			var v nvml.BrandType
			v, ret = d.GetBrand()
			x = int(v)
		case numberArchitecture:
			var v nvml.DeviceArchitecture
			v, ret = d.GetArchitecture()
			x = int(v)
		case numberMigMode:
			x, y, ret = d.GetMigMode()
		case numberMemory:
			var m nvml.Memory
			m, ret = d.GetMemoryInfo()
			x, y, z = int(m.Total), int(m.Free), int(m.Used)
		case numberPciDeviceID:
			var p nvml.PciInfo
			p, ret = d.GetPciInfo()
			x = int(p.PciDeviceId)
		default:
			return C.int(nvml.ERROR_NOT_SUPPORTED)
		}
	}
	for _, out := range []struct {
		p *C.ulonglong
		v int
	}{{a, x}, {b, y}, {c, z}} {
		if out.p != nil {
			*out.p = C.ulonglong(out.v)
		}
	}
	return C.int(ret)
}

//export trainopsNvmlIndexOf
func trainopsNvmlIndexOf(uuid *C.char, busID C.int) C.int {
	want := C.GoString(uuid)
	n, _ := server.DeviceGetCount()
	for i := range n {
		d := device(C.int(i)).(*dgxa100.Device)
		if (busID == 0 && d.UUID == want) || (busID != 0 && samePCIAddress(d.PciBusID, want)) {
			return C.int(i)
		}
	}
	return -1
}

// samePCIAddress reports whether two PCI bus IDs name one device: NVML
// takes either form nvml.h gives (an eight-digit domain, or the legacy
// four), in either case.
func samePCIAddress(a, b string) bool {
	var x, y [3]uint
	_, errA := fmt.Sscanf(a, "%x:%x:%x.", &x[0], &x[1], &x[2])
	_, errB := fmt.Sscanf(b, "%x:%x:%x.", &y[0], &y[1], &y[2])
	return errA == nil && errB == nil && x == y
}
