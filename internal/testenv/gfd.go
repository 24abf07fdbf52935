// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// GFDOutput is where GPU feature discovery writes its labels on a node,
// for Node Feature Discovery's worker to read (its features.d folder).
const GFDOutput = nfdFeaturesDir + "/gfd"

// nfdFeaturesDir is Node Feature Discovery's folder of features files.
const nfdFeaturesDir = "/etc/kubernetes/node-feature-discovery/features.d"

// StopGFD stops GPU feature discovery on the real node, if it runs; it
// removes its labels file as it stops.
func (e *Env) StopGFD() {
	if e.gfd != nil {
		e.gfd.Stop(10 * time.Second)
		e.gfd = nil
	}
}

// StartGFD runs NVIDIA's GPU feature discovery on the real node as the
// ClusterPolicy cp's GFD DaemonSet runs it (componentEnv), in place of the
// one running, and returns the labels it wrote to GFDOutput. It keeps
// running until replaced or the environment stops: GFD removes its file
// when it stops, as its labels then no longer hold.
func (e *Env) StartGFD(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy) (map[string]string, error) {
	e.StopGFD()
	bin, err := NodeBinDir()
	if err != nil {
		return nil, err
	}
	env, err := componentEnv(cp, builder.GFDDaemonSet, "gpu-feature-discovery", filepath.Join(e.Dir, "gfd"))
	if err != nil {
		return nil, err
	}
	if err := os.Remove(GFDOutput); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	pci := filepath.Join(e.Dir, "gfd", "pci")
	if err := writePCIDevices(bin, pci); err != nil {
		return nil, err
	}
	// GFD reads each GPU's PCI class from sysfs, where this machine has
	// no GPU: in a mount namespace of its own, the stand-in's PCI devices
	// are its /sys/bus/pci/devices.
	p, err := startProc("gpu-feature-discovery", "unshare", []string{"--mount", "--propagation", "private", "sh", "-c",
		fmt.Sprintf("mount --bind %s %s && exec %s", pci, pciDevicesDir, filepath.Join(bin, "nvidia", "gpu-feature-discovery"))},
		filepath.Join(e.Dir, "logs"), env...)
	if err != nil {
		return nil, err
	}
	e.gfd = p
	labels := map[string]string{}
	err = waitFor(p, "gpu-feature-discovery", time.Minute, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		// GFD writes a file beside it and renames it into place.
		raw, err := os.ReadFile(GFDOutput)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				labels[k] = v
			}
		}
		return nil
	})
	return labels, err
}

// pciDevicesDir is where the kernel lists PCI devices.
const pciDevicesDir = "/sys/bus/pci/devices"

// pciResources is how many lines the kernel writes into a PCI device's
// resource file: its six BARs, its ROM and the bridge windows.
const pciResources = 13

// gpuPCIClass is the PCI class of the stand-in's GPUs: a 3D controller,
// the class Node Feature Discovery's GPUNodeLabel names.
const gpuPCIClass = 0x030200

// writePCIDevices writes into dir, afresh, the sysfs entries of the
// stand-in's GPUs as the kernel lists a PCI device: vendor, device and
// class, the standard header of its configuration space (no capability
// list), its NUMA node and its resources (none mapped).
func writePCIDevices(bin, dir string) error {
	m, err := readStandIn(bin)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for _, d := range m.PCI {
		vendor, device := uint16(d.ID), uint16(d.ID>>16)
		config := make([]byte, 256)
		binary.LittleEndian.PutUint16(config[0:], vendor)
		binary.LittleEndian.PutUint16(config[2:], device)
		class := uint32(gpuPCIClass)
		config[9], config[10], config[11] = byte(class), byte(class>>8), byte(class>>16)
		err := writeFiles(filepath.Join(dir, d.Address), map[string]string{
			"vendor":    fmt.Sprintf("0x%04x\n", vendor),
			"device":    fmt.Sprintf("0x%04x\n", device),
			"class":     fmt.Sprintf("0x%06x\n", gpuPCIClass),
			"config":    string(config),
			"numa_node": "0\n",
			"resource":  strings.Repeat("0x0000000000000000 0x0000000000000000 0x0000000000000000\n", pciResources),
		})
		if err != nil {
			return err
		}
	}
	return nil
}
