// SPDX-License-Identifier: Apache-2.0

package gpuhealth

import "sort"

// XIDSource names where the XID table comes from: NVIDIA's Xid catalog for
// Ampere and newer GPUs, its "Resolution Bucket (Immediate Action)"
// column. docs/gpu-nodes.md shows the same table.
const XIDSource = "NVIDIA Xid Catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), Resolution Bucket (Immediate Action)"

// XID is one row of the table: an XID error, what NVIDIA's catalog says to
// do about it, and what trainops does.
type XID struct {
	Code        int
	Description string
	// Bucket is the catalog's immediate action: RESTART_APP (the
	// application that caused it restarts, the GPU is fine), RESET_GPU
	// (the GPU needs a reset: a driver reload or a reboot), RESTART_BM
	// (the node needs a reboot).
	Bucket string
	// Action is what trainops does: OutOfService for RESET_GPU and
	// RESTART_BM, Report for RESTART_APP.
	Action Action
}

// xids is the table. An XID not in it is reported and never acted on.
var xids = []XID{
	{8, "GPU stopped processing (channel idle timeout)", "RESTART_APP", Report},
	{13, "Graphics Engine Exception", "RESTART_APP", Report},
	{31, "GPU memory page fault", "RESTART_APP", Report},
	{43, "GPU stopped processing (channel reset by the driver)", "RESTART_APP", Report},
	{45, "Preemptive cleanup, due to previous errors", "RESTART_APP", Report},
	{48, "Double Bit ECC Error", "RESET_GPU", OutOfService},
	{63, "ECC page retirement or row remapping recording event", "RESET_GPU", OutOfService},
	{64, "ECC page retirement or row remapper recording failure", "RESET_GPU", OutOfService},
	{69, "Graphics Engine class error", "RESTART_APP", Report},
	{74, "NVLink Error", "RESET_GPU", OutOfService},
	{79, "GPU has fallen off the bus", "RESTART_BM", OutOfService},
	{92, "High single-bit ECC error rate", "RESET_GPU", OutOfService},
	{94, "Contained ECC error (the row is remapped at the next GPU reset)", "RESET_GPU", OutOfService},
	{95, "Uncontained ECC error", "RESET_GPU", OutOfService},
	{119, "GSP RPC timeout", "RESET_GPU", OutOfService},
	{120, "GSP error", "RESET_GPU", OutOfService},
}

// LookupXID is the table's row for code.
func LookupXID(code int) (XID, bool) {
	i := sort.Search(len(xids), func(i int) bool { return xids[i].Code >= code })
	if i < len(xids) && xids[i].Code == code {
		return xids[i], true
	}
	return XID{}, false
}

// XIDs is the whole table, by code.
func XIDs() []XID { return append([]XID(nil), xids...) }
