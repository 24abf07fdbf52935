// SPDX-License-Identifier: Apache-2.0

package driverupgrade

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/gpustack"
)

// The driver upgrade's node label and its states, named as NVIDIA's
// upgrade library (github.com/NVIDIA/k8s-operator-libs, pkg/upgrade) names
// them, so the GPU Operator's runbooks read the same.
const (
	UpgradeStateLabel = "nvidia.com/gpu-driver-upgrade-state"

	UpgradeRequired    = "upgrade-required"
	DrainRequired      = "drain-required"
	PodRestartRequired = "pod-restart-required"
	ValidationRequired = "validation-required"
	UpgradeDone        = "upgrade-done"
	UpgradeFailed      = "upgrade-failed"

	// upgradeAnnotation holds, on a node upgrading, since when it is in its
	// state and whether trainops cordoned it.
	upgradeAnnotation = "trainops.dev/driver-upgrade"
)

// The reasons of DriverUpgradedCondition.
const (
	ReasonUpToDate      = "UpToDate"
	ReasonUpgrading     = "Upgrading"
	ReasonUpgradeFailed = "UpgradeFailed"
)

// upgradeRecord is trainops's note on a node upgrading.
type upgradeRecord struct {
	Since    metav1.Time `json:"since"`
	Cordoned bool        `json:"cordoned,omitempty"`
	// Why a node failed.
	Failure string `json:"failure,omitempty"`
	// Restarted is when trainops deleted the node's driver and validator
	// pods: only a validator pod made since then has validated the new
	// driver.
	Restarted *metav1.Time `json:"restarted,omitempty"`
}

func upgradeRecordOf(n *corev1.Node) upgradeRecord {
	var rec upgradeRecord
	if raw := n.Annotations[upgradeAnnotation]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &rec)
	}
	return rec
}

// upgradeNode is one GPU node as an upgrade pass sees it.
type upgradeNode struct {
	node  *corev1.Node
	state string
	rec   upgradeRecord
	// driver is the node's driver pod (nil: none); current, whether it is
	// of its DaemonSet's newest revision; ready, whether it is ready.
	driver         *corev1.Pod
	current, ready bool
	// validator is the node's validator pod (nil: none).
	validator *corev1.Pod
}

// validated reports whether the node's validator pod, made after its
// driver was restarted, is ready: it has checked the new driver and
// written driver-ready, as the GPU Operator's upgrade waits for its
// app=nvidia-operator-validator pods.
func (u upgradeNode) validated() bool {
	if u.validator == nil || !gpustack.PodReady(u.validator) {
		return false
	}
	return u.rec.Restarted == nil || !u.validator.CreationTimestamp.Before(&metav1.Time{Time: u.rec.Restarted.Truncate(time.Second)})
}

// upgrading reports whether a state counts against the parallel limit.
func upgrading(state string) bool {
	return state == DrainRequired || state == PodRestartRequired || state == ValidationRequired
}

// unsettled names what the rollout waits for before a node may start
// upgrading, as the words after "no node starts until the" ("": nothing):
// the ClusterPolicy's spec applied, and each driver DaemonSet's template
// seen by the DaemonSet controller, which makes its newest revision. Each
// operating system's DaemonSet takes a new driver in its own time;
// deciding meanwhile would judge the pods of a DaemonSet not yet seen to
// be current, and start a node of another first.
func unsettled(cp *gpuv1alpha1.ClusterPolicy, drivers []appsv1.DaemonSet) string {
	if cp.Status.ObservedGeneration != cp.Generation {
		return "ClusterPolicy's generation " + strconv.FormatInt(cp.Generation, 10) + " is applied"
	}
	for _, ds := range drivers {
		if strings.HasPrefix(ds.Name, builder.DriverDaemonSet) && ds.Status.ObservedGeneration < ds.Generation {
			return "DaemonSet controller has seen generation " + strconv.FormatInt(ds.Generation, 10) + " of " + ds.Namespace + "/" + ds.Name
		}
	}
	return ""
}

// upgradeLimit is how many nodes may upgrade at once.
func upgradeLimit(p gpuv1alpha1.DriverUpgradePolicy, gpuNodes int) int {
	limit := 1
	if p.MaxParallelUpgrades != nil {
		limit = int(*p.MaxParallelUpgrades)
	}
	return max(min(limit, gpustack.NodeCount(p.MaxUnavailable, intstr.FromString("25%"), gpuNodes)), 1)
}

// longestInState is how long the node longest in one upgrading state has
// been in it (0: none upgrading): a rollout of many nodes moves on, one
// node that stays is stuck.
func longestInState(views []upgradeNode, now time.Time) time.Duration {
	var longest time.Duration
	for _, u := range views {
		if upgrading(u.state) {
			longest = max(longest, durationSince(u.rec.Since, now))
		}
	}
	return longest
}

// upgradeSummary is the DriverUpgraded condition: ok, reason, message;
// waitFor is what the rollout waits for before starting a node (unsettled).
func upgradeSummary(nodes []upgradeNode, waitFor string) (bool, string, string) {
	done := 0
	var going, failed []string
	for _, u := range nodes {
		switch {
		case u.state == UpgradeFailed:
			failed = append(failed, fmt.Sprintf("%s (%s)", u.node.Name, u.rec.Failure))
		case upgrading(u.state) || u.state == UpgradeRequired:
			going = append(going, fmt.Sprintf("%s (%s)", u.node.Name, u.state))
		case u.current && u.ready:
			done++
		}
	}
	msg := fmt.Sprintf("%d of %d GPU nodes run the current driver", done, len(nodes))
	if len(going) > 0 {
		msg += "; upgrading: " + strings.Join(going, ", ")
		if waitFor != "" {
			msg += "; no node starts until the " + waitFor
		}
	}
	if len(failed) > 0 {
		return false, ReasonUpgradeFailed, msg + "; failed, the rollout stopped: " + strings.Join(failed, ", ") +
			" (fix the node's driver; once its pod of the current driver is ready the rollout goes on)"
	}
	if len(going) > 0 || done < len(nodes) {
		return false, ReasonUpgrading, msg
	}
	return true, ReasonUpToDate, msg
}

func durationSince(t metav1.Time, now time.Time) time.Duration { return now.Sub(t.Time) }

// undeletable lists the GPU pods of pods that podDeletion keeps, as
// kubectl drain's filters the GPU Operator uses: one no controller
// manages (unless force), one with an emptyDir volume (unless
// deleteEmptyDir).
func undeletable(pods []corev1.Pod, pd gpuv1alpha1.PodDeletionSpec) []string {
	var out []string
	for i := range pods {
		p := &pods[i]
		if !gpustack.GPUPod(p) {
			continue
		}
		switch {
		case !pd.Force && metav1.GetControllerOf(p) == nil:
			out = append(out, p.Namespace+"/"+p.Name+" (no controller manages it: podDeletion.force evicts it)")
		case !pd.DeleteEmptyDir && slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.EmptyDir != nil }):
			out = append(out, p.Namespace+"/"+p.Name+" (it has an emptyDir volume: podDeletion.deleteEmptyDir evicts it)")
		}
	}
	return out
}
