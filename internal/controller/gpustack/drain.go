// SPDX-License-Identifier: Apache-2.0

package gpustack

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/prometheus/client_golang/prometheus"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
)

// DrainResult is where the eviction of a node's GPU pods stands.
type DrainResult struct {
	// Remaining are the GPU pods still on the node.
	Remaining int
	// blocked names, per pod, the PodDisruptionBudgets that refused its
	// eviction.
	blocked map[string][]string
	// TimedOut: pods remain past drain.timeout.
	TimedOut bool
	forced   int
}

// Message says, for the condition, what keeps the node's pods.
func (d DrainResult) Message() string {
	if d.Remaining == 0 {
		return ""
	}
	msg := fmt.Sprintf("%d GPU pods still on it", d.Remaining)
	if len(d.blocked) > 0 {
		var parts []string
		for _, pod := range slices.Sorted(maps.Keys(d.blocked)) {
			parts = append(parts, fmt.Sprintf("%s by PodDisruptionBudget %s", pod, strings.Join(d.blocked[pod], ", ")))
		}
		msg += "; eviction refused for " + strings.Join(parts, ", ")
	}
	if d.TimedOut && d.forced == 0 {
		msg += "; drain.timeout passed, nothing force-deleted (drain.force is off)"
	}
	return msg
}

// GPUPod reports whether p uses GPUs and may be evicted: it asks for an
// nvidia.com resource, is not a DaemonSet's (the GPU stack's own pods,
// which tolerate the taint) and has not ended.
func GPUPod(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return false
		}
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			for name := range c.Resources.Limits {
				if strings.HasPrefix(string(name), "nvidia.com/") {
					return true
				}
			}
			for name := range c.Resources.Requests {
				if strings.HasPrefix(string(name), "nvidia.com/") {
					return true
				}
			}
		}
	}
	return false
}

// PodsOn lists the pods bound to node, from the API server: the cache
// holds only trainops's own.
func (d Nodes) PodsOn(ctx context.Context, node string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := d.Live().List(ctx, &pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return nil, fmt.Errorf("list pods on node %s: %w", node, err)
	}
	if pods.Items == nil {
		return []corev1.Pod{}, nil // listed, and none
	}
	return pods.Items, nil
}

// DriverRestartedOn reports whether one of the policy's driver pods on the
// node was created after since.
func DriverRestartedOn(pods []corev1.Pod, cp *gpuv1alpha1.ClusterPolicy, since time.Time) bool {
	for _, p := range pods {
		if p.Namespace == cp.Spec.Namespace && p.Labels[builder.LabelClusterPolicy] == cp.Name &&
			strings.HasPrefix(p.Labels["app"], builder.DriverDaemonSet) && p.CreationTimestamp.After(since) {
			return true
		}
	}
	return false
}

// Drain evicts the GPU pods of a node through the Eviction API, so
// PodDisruptionBudgets hold; once Drain.timeout has passed since since, it
// deletes those left only when Drain.force says so. why says, in Events,
// why the node is drained.
func (dp Nodes) Drain(ctx context.Context, node *corev1.Node, since time.Time, drain gpuv1alpha1.DrainSpec, why string, pods []corev1.Pod, now time.Time) (DrainResult, error) {
	d := DrainResult{blocked: map[string][]string{}}
	d.TimedOut = now.Sub(since) >= DurationOr(drain.Timeout, 5*time.Minute)
	for i := range pods {
		p := &pods[i]
		if !GPUPod(p) {
			continue
		}
		d.Remaining++
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		key := p.Namespace + "/" + p.Name
		if d.TimedOut && drain.Force {
			if err := dp.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
				return d, fmt.Errorf("delete pod %s on node %s: %w", key, node.Name, err)
			}
			d.forced++
			remediationEvictions.WithLabelValues("forced").Inc()
			dp.Recorder.Eventf(node, p, corev1.EventTypeWarning, "PodForceDeleted", "Drain", "deleted GPU pod %s (%s): its eviction was refused past drain.timeout and drain.force is on", key, why)
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}, DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}}
		err := dp.SubResource("eviction").Create(ctx, p, ev)
		switch {
		case err == nil:
			remediationEvictions.WithLabelValues("evicted").Inc()
			dp.Recorder.Eventf(node, p, corev1.EventTypeNormal, "PodEvicted", "Drain", "evicted GPU pod %s from node %s: %s", key, node.Name, why)
		case apierrors.IsTooManyRequests(err):
			pdbs, lerr := dp.BudgetsOf(ctx, p)
			if lerr != nil {
				return d, lerr
			}
			if _, seen := d.blocked[key]; !seen {
				remediationEvictions.WithLabelValues("refused").Inc()
			}
			d.blocked[key] = pdbs
		case apierrors.IsNotFound(err):
		default:
			return d, fmt.Errorf("evict pod %s from node %s: %w", key, node.Name, err)
		}
	}
	return d, nil
}

// BudgetsOf names the PodDisruptionBudgets that select p.
func (d Nodes) BudgetsOf(ctx context.Context, p *corev1.Pod) ([]string, error) {
	var list policyv1.PodDisruptionBudgetList
	if err := d.Live().List(ctx, &list, client.InNamespace(p.Namespace)); err != nil {
		return nil, fmt.Errorf("list PodDisruptionBudgets of %s: %w", p.Namespace, err)
	}
	var names []string
	for _, pdb := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		names = append(names, p.Namespace+"/"+pdb.Name)
	}
	sort.Strings(names)
	if len(names) == 0 {
		names = []string{"(none found: the eviction API refused it)"}
	}
	return names, nil
}

// remediationEvictions counts the GPU pods drains evicted, by result:
// drains of nodes out of service and of nodes whose driver is upgraded.
var remediationEvictions = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "trainops_gpu_evictions_total",
	Help: "GPU pods evicted from nodes out of service, by result: evicted, refused (a PodDisruptionBudget), forced (deleted past drain.timeout with drain.force).",
}, []string{"result"})

func init() { metrics.Registry.MustRegister(remediationEvictions) }
