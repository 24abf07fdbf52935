// SPDX-License-Identifier: Apache-2.0

package nvmltest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// build builds the stand-in as libnvidia-ml.so.1 into a temporary folder
// and returns its path, and go-nvml's nvml.h.
func build(t *testing.T) (lib, header string) {
	t.Helper()
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/go-nvml").Output()
	if err != nil {
		t.Fatal(err)
	}
	include := filepath.Join(strings.TrimSpace(string(dir)), "pkg", "nvml")
	lib = filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", lib, "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-I"+include)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the stand-in: %v\n%s", err, out)
	}
	return lib, filepath.Join(include, "nvml.h")
}

// TestStandInAnswersAsTheMock: loaded by go-nvml as a program loads the
// driver's library, the stand-in says what go-nvml's DGX A100 mock says,
// device by device; its UUIDs are distinct, found again by UUID and by PCI
// bus ID, and the same in another process; a function it does not answer
// returns NOT_SUPPORTED; and it holds every function nvml.h declares.
func TestStandInAnswersAsTheMock(t *testing.T) {
	path, header := build(t)
	lib := nvml.New(nvml.WithLibraryPath(path))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	defer lib.Shutdown()
	mock := dgxa100.New()

	if got, _ := lib.SystemGetDriverVersion(); got != mock.DriverVersion {
		t.Errorf("driver version %q, the mock's %q", got, mock.DriverVersion)
	}
	if got, _ := lib.SystemGetCudaDriverVersion(); got != mock.CudaDriverVersion {
		t.Errorf("CUDA driver version %d, the mock's %d", got, mock.CudaDriverVersion)
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS || n != len(mock.Devices) {
		t.Fatalf("%d devices (%v), the mock has %d", n, ret, len(mock.Devices))
	}
	uuids := map[string]bool{}
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatalf("device %d: %v", i, ret)
		}
		want := mock.Devices[i].(*dgxa100.Device)
		name, _ := d.GetName()
		mem, _ := d.GetMemoryInfo()
		minor, _ := d.GetMinorNumber()
		major, minorCC, _ := d.GetCudaComputeCapability()
		pci, _ := d.GetPciInfo()
		arch, _ := d.GetArchitecture()
		if name != want.Name || mem != want.MemoryInfo || minor != want.Minor || major != want.CudaComputeCapability.Major ||
			minorCC != want.CudaComputeCapability.Minor || arch != want.Architecture || pci.PciDeviceId != 0x20B010DE {
			t.Errorf("device %d: %s %+v minor %d cc %d.%d arch %d pci %#x; the mock's %s %+v minor %d cc %d.%d arch %d",
				i, name, mem, minor, major, minorCC, arch, pci.PciDeviceId, want.Name, want.MemoryInfo, want.Minor,
				want.CudaComputeCapability.Major, want.CudaComputeCapability.Minor, want.Architecture)
		}
		// nvml.h: busId in NVML_DEVICE_PCI_BUS_ID_FMT (an eight-digit
		// domain), busIdLegacy in the four-digit form the mock keeps.
		var domain, bus, dev uint32
		if _, err := fmt.Sscanf(want.PciBusID, "%x:%x:%x.", &domain, &bus, &dev); err != nil {
			t.Fatalf("the mock's bus ID %q: %v", want.PciBusID, err)
		}
		busID, legacy := fmt.Sprintf("%08X:%02X:%02X.0", domain, bus, dev), fmt.Sprintf("%04X:%02X:%02X.0", domain, bus, dev)
		if got, gotLegacy := cString(pci.BusId[:]), cString(pci.BusIdLegacy[:]); got != busID || gotLegacy != legacy || pci.Domain != domain || pci.Bus != bus || pci.Device != dev {
			t.Errorf("device %d: PCI %q (legacy %q) at %x:%x:%x, want %q (%q)", i, got, gotLegacy, pci.Domain, pci.Bus, pci.Device, busID, legacy)
		}
		uuid, _ := d.GetUUID()
		if !regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(uuid) || uuids[uuid] {
			t.Errorf("device %d: UUID %q is not a distinct GPU UUID", i, uuid)
		}
		uuids[uuid] = true
		for _, by := range []func() (nvml.Device, nvml.Return){
			func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleByUUID(uuid) },
			func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleByPciBusId(want.PciBusID) },
			func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleByPciBusId(busID) },
		} {
			if again, ret := by(); ret != nvml.SUCCESS {
				t.Errorf("device %d not found again: %v", i, ret)
			} else if idx, _ := again.GetIndex(); idx != i {
				t.Errorf("device %d found again as %d", i, idx)
			}
		}
		// nvml.h: zero MIG devices where MIG mode is off, as the device
		// plugin's MIG strategies ask on every GPU.
		if mode, _, _ := d.GetMigMode(); mode != nvml.DEVICE_MIG_DISABLE {
			t.Errorf("device %d: MIG mode %d, the mock's GPUs start with it off", i, mode)
		} else if count, ret := d.GetMaxMigDeviceCount(); ret != nvml.SUCCESS || count != 0 {
			t.Errorf("device %d with MIG off: max MIG device count %d (%v), want 0 (SUCCESS)", i, count, ret)
		}
		// The topology the device plugin's aligned allocation reads: none
		// closer than the machine between two GPUs, the mock defining none.
		for j := range n {
			other, _ := lib.DeviceGetHandleByIndex(j)
			want := nvml.TOPOLOGY_SYSTEM
			if j == i {
				want = nvml.TOPOLOGY_INTERNAL
			}
			if level, ret := d.GetTopologyCommonAncestor(other); ret != nvml.SUCCESS || level != want {
				t.Errorf("devices %d and %d: common ancestor %v (%v), want %v", i, j, level, ret, want)
			}
		}
		if _, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("device %d: temperature returned %v, want NOT_SUPPORTED", i, ret)
		}
	}
	if first, _ := lib.DeviceGetHandleByIndex(0); true {
		uuid, _ := first.GetUUID()
		if other := uuidInAnotherProcess(t, path); other != uuid {
			t.Errorf("device 0 is %s here and %s in another process: a GPU's UUID is fixed", uuid, other)
		}
	}

	raw, err := os.ReadFile(header)
	if err != nil {
		t.Fatal(err)
	}
	declared := regexp.MustCompile(`nvmlReturn_t\s+DECLDIR\s+(nvml\w+)\s*\(`).FindAllSubmatch(raw, -1)
	if len(declared) < 300 {
		t.Fatalf("only %d functions read from nvml.h", len(declared))
	}
	for _, m := range declared {
		if err := lib.Extensions().LookupSymbol(string(m[1])); err != nil {
			t.Errorf("the stand-in lacks %s, which nvml.h declares: %v", m[1], err)
		}
	}
}

// uuidInAnotherProcess is device 0's UUID as a new process loading the
// library sees it (this test binary, run again).
func uuidInAnotherProcess(t *testing.T, lib string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "NVML_STANDIN="+lib)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("another process: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`uuid=(\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("another process printed no UUID:\n%s", out)
	}
	return string(m[1])
}

// TestMain, when uuidInAnotherProcess runs this binary again, prints
// device 0's UUID as this new process loads the library, and exits.
func TestMain(m *testing.M) {
	path := os.Getenv("NVML_STANDIN")
	if path == "" {
		os.Exit(m.Run())
	}
	lib := nvml.New(nvml.WithLibraryPath(path))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		os.Stderr.WriteString("Init: " + ret.Error() + "\n")
		os.Exit(1)
	}
	d, _ := lib.DeviceGetHandleByIndex(0)
	uuid, _ := d.GetUUID()
	os.Stdout.WriteString("uuid=" + uuid + "\n")
	os.Exit(0)
}

// cString is the NUL-terminated string in b.
func cString(b []int8) string {
	var out []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
