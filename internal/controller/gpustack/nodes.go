// SPDX-License-Identifier: Apache-2.0

// Package gpustack holds what the GPU stack's reconcilers share: the
// active ClusterPolicy, the operations on GPU nodes (listing a node's
// pods, draining it, patching it) and the ClusterPolicy conditions each
// writer owns.
package gpustack

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/status"
	"github.com/trainops/trainops/internal/textsafe"
)

// The ClusterPolicy's conditions that other writers than the ClusterPolicy
// reconciler own (see PolicyStatus).
const (
	// GPUNodesHealthyCondition, on the active ClusterPolicy with
	// remediation on, says which GPU nodes are out of service and why,
	// which wait, and whose health is unknown.
	GPUNodesHealthyCondition = "GPUNodesHealthy"
	// DriverUpgradedCondition, on the active ClusterPolicy with
	// autoUpgrade, says how far the driver rollout is.
	DriverUpgradedCondition = "DriverUpgraded"
)

// Nodes are the operations on GPU nodes that remediation and driver
// upgrades share: reading the active ClusterPolicy and the nodes, listing
// a node's pods, draining it, patching it, and writing the conditions
// each owns on the ClusterPolicy.
type Nodes struct {
	client.Client
	// APIReader reads live from the API server, for what the cache does
	// not hold: a node's pods, PodDisruptionBudgets, the live status of a
	// ClusterPolicy (nil: Client).
	APIReader client.Reader
	// Recorder records the Events of drains.
	Recorder events.EventRecorder
}

// Live reads from the API server (APIReader), for what the cache
// does not hold.
func (d Nodes) Live() client.Reader {
	if d.APIReader != nil {
		return d.APIReader
	}
	return d.Client
}

// Clock tells the time (nil: time.Now).
type Clock func() time.Time

func (c Clock) Time() time.Time {
	if c != nil {
		return c()
	}
	return time.Now()
}

// PolicyAndNodes reads the active ClusterPolicy (nil: none) and every
// node, which a pass over the GPU nodes starts from.
func (d Nodes) PolicyAndNodes(ctx context.Context) (*gpuv1alpha1.ClusterPolicy, []corev1.Node, error) {
	cp, err := ActivePolicy(ctx, d.Client)
	if err != nil {
		return nil, nil, err
	}
	var nodes corev1.NodeList
	if err := d.List(ctx, &nodes); err != nil {
		return nil, nil, err
	}
	return cp, nodes.Items, nil
}

func Enabled(b *bool) bool { return b == nil || *b }

// PatchNode changes a node as change says, in one merge patch guarded by
// its resourceVersion: a taint list is replaced whole, so another's taint
// added meanwhile makes the patch fail and the pass come again rather
// than drop it.
func (d Nodes) PatchNode(ctx context.Context, n *corev1.Node, change func(*corev1.Node)) error {
	base := n.DeepCopy()
	change(n)
	if err := d.Patch(ctx, n, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(builder.FieldManager)); err != nil {
		return fmt.Errorf("patch node %s: %w", n.Name, err)
	}
	return nil
}

// SetPolicyCondition writes a condition of the ClusterPolicy when its
// reason or message changed: True with reason when ok, else False.
func (d Nodes) SetPolicyCondition(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, typ string, ok bool, reason, msg string) error {
	msg = textsafe.Bound(msg, textsafe.MessageBytes)
	if c := conditions.Get(cp, typ); c != nil && c.Message == msg && c.Reason == reason && (c.Status == metav1.ConditionTrue) == ok {
		return nil
	}
	w := d.PolicyStatus()
	w.Owns = func(t string) bool { return t == typ }
	return w.Change(ctx, cp, func() {
		if ok {
			conditions.MarkTrue(cp, typ, reason, "%s", msg)
		} else {
			conditions.MarkFalse(cp, typ, reason, "%s", msg)
		}
	})
}

// PolicyStatus writes a ClusterPolicy's status, whose conditions three
// writers share: the ClusterPolicy reconciler, remediation
// (GPUNodesHealthy) and the driver upgrade (DriverUpgraded). Each writes
// onto the live list the conditions it owns, and of the others only
// those it changed.
func (d Nodes) PolicyStatus() status.Writer {
	return status.Writer{Client: d.Client, Shared: d.Live(), Owns: func(t string) bool {
		return t != GPUNodesHealthyCondition && t != DriverUpgradedCondition
	}}
}

func DurationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

// NodeCount is v (def when nil), a number of nodes or a percentage of
// gpuNodes rounded up, as a number of nodes: at least one.
func NodeCount(v *intstr.IntOrString, def intstr.IntOrString, gpuNodes int) int {
	if v == nil {
		v = &def
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, gpuNodes, true)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// SetJSONAnnotation records v on n, as JSON, under key.
func SetJSONAnnotation(n *corev1.Node, key string, v any) {
	raw, _ := json.Marshal(v)
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[key] = string(raw)
}

func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ActivePolicy is the oldest live ClusterPolicy (by creation, then name):
// a cluster has one GPU stack. nil when there is none.
func ActivePolicy(ctx context.Context, c client.Reader) (*gpuv1alpha1.ClusterPolicy, error) {
	var list gpuv1alpha1.ClusterPolicyList
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	var live []gpuv1alpha1.ClusterPolicy
	for _, cp := range list.Items {
		if cp.DeletionTimestamp.IsZero() {
			live = append(live, cp)
		}
	}
	if len(live) == 0 {
		return nil, nil
	}
	sort.Slice(live, func(i, j int) bool {
		ti, tj := live[i].CreationTimestamp, live[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return live[i].Name < live[j].Name
	})
	return &live[0], nil
}

// NodesOf are the GPU-node operations of a reconciler with dependencies d.
func NodesOf(d children.Deps) Nodes {
	return Nodes{Client: d.Client, APIReader: d.APIReader, Recorder: d.Recorder}
}
