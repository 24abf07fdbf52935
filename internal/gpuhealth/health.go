// SPDX-License-Identifier: Apache-2.0

package gpuhealth

import (
	"fmt"
	"math"
	"regexp"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// Action is what a problem asks of its node.
type Action int

const (
	// Report records the problem (an Event, a metric) and does nothing
	// else: it fails only the job that caused it, or it is not in the
	// table.
	Report Action = iota
	// OutOfService takes the node out of service.
	OutOfService
)

// Causes of a node out of service besides an XID ("xid-<code>") and a
// health reporter's condition (its type). Each is the value of the taint.
const (
	CauseRowRemapFailure = "row-remap-failure"
	CauseECCDBE          = "ecc-dbe"
	CauseTemperature     = "temperature"
)

// Problem is one thing wrong with a node's GPUs.
type Problem struct {
	// Cause is short, a label value: the taint's value when the node goes
	// out of service.
	Cause  string
	Action Action
	// Known is false for an XID or condition reason not in the table.
	Known   bool
	Message string
}

// Thresholds are the limits beyond which a GPU reading takes its node out
// of service.
type Thresholds struct {
	// MaxTemperature in degrees Celsius; 0 leaves temperature alone.
	MaxTemperature float64
}

// Classify finds what the exporter's readings of one node say is wrong.
func Classify(gpus []GPU, th Thresholds) []Problem {
	var out []Problem
	for _, g := range gpus {
		where := fmt.Sprintf("GPU %s (%s)", g.GPU, g.UUID)
		if g.XID != 0 {
			out = append(out, xidProblem(g.XID, where))
		}
		if g.RowRemapFailure {
			out = append(out, Problem{Cause: CauseRowRemapFailure, Action: OutOfService, Known: true,
				Message: where + " failed to remap a row of its memory after an uncorrectable error: it needs a field diagnosis (DCGM_FI_DEV_ROW_REMAP_FAILURE)"})
		}
		if g.ECCDBE > 0 {
			out = append(out, Problem{Cause: CauseECCDBE, Action: OutOfService, Known: true,
				Message: fmt.Sprintf("%s had %s double-bit ECC errors since its driver loaded (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)", where, num(g.ECCDBE))})
		}
		if th.MaxTemperature > 0 && g.TempC >= th.MaxTemperature {
			out = append(out, Problem{Cause: CauseTemperature, Action: OutOfService, Known: true,
				Message: fmt.Sprintf("%s is at %s°C, at or above remediation.maxGPUTemperature %s°C", where, num(g.TempC), num(th.MaxTemperature))})
		}
	}
	return out
}

func xidProblem(v float64, where string) Problem {
	code := int(v)
	cause := "xid-" + strconv.Itoa(code)
	if v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
		return Problem{Cause: "xid-unknown", Action: Report, Message: fmt.Sprintf("%s reported XID %s, which is no XID: reported, not acted on", where, num(v))}
	}
	x, ok := LookupXID(code)
	if !ok {
		return Problem{Cause: cause, Action: Report, Message: fmt.Sprintf("%s reported XID %d, which is not in trainops's table: reported, not acted on", where, code)}
	}
	what := "it fails only the job that caused it (" + x.Bucket + "): not acted on"
	if x.Action == OutOfService {
		what = "the GPU needs " + bucketWords(x.Bucket)
	}
	return Problem{Cause: cause, Action: x.Action, Known: true, Message: fmt.Sprintf("%s reported XID %d (%s): %s", where, code, x.Description, what)}
}

func bucketWords(bucket string) string {
	if bucket == "RESTART_BM" {
		return "the node rebooted (RESTART_BM)"
	}
	return "a reset: a driver restart or a reboot (" + bucket + ")"
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// xidReason matches a condition reason that names an XID, as
// node-problem-detector's NVIDIA plugins write it (XID79, Xid_48).
var xidReason = regexp.MustCompile(`(?i)^xid[-_]?([0-9]{1,6})$`)

// FromCondition is the problem a health reporter's Node condition, one of
// remediation.nodeConditions with status True, reports. A reason naming an
// XID is classified by the table; any other reason takes the node out of
// service under the condition's type, as the reporter asks.
func FromCondition(c corev1.NodeCondition) Problem {
	msg := fmt.Sprintf("condition %s is True (%s: %s)", c.Type, c.Reason, c.Message)
	if m := xidReason.FindStringSubmatch(c.Reason); m != nil {
		code, _ := strconv.Atoi(m[1])
		p := xidProblem(float64(code), "the node")
		p.Message = msg + "; " + p.Message
		return p
	}
	return Problem{Cause: string(c.Type), Action: OutOfService, Known: true, Message: msg}
}
