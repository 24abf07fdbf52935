// SPDX-License-Identifier: Apache-2.0

package children

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainops/trainops/internal/builder"
)

// CacheOptions are the informer caches the reconcilers read: only
// trainops's own children of the kinds a cluster has many of, and of each
// only what a reconciler reads.
//
// Each child kind's transform is its row of childKinds.
//
//   - Children compared for drift (see drift) keep their whole spec, pod
//     template included, and trainops's own entry of their managed fields,
//     which says which fields to compare.
//   - A PyJob's Jobs and claims are created, never compared (their specs
//     cannot change), and there are thousands: the Jobs' pod templates,
//     selectors, policies, labels and managed fields are dropped, which is
//     most of a large cluster's cache.
//   - Services, one per PyJob, are kept as metadata only, with a hash of
//     trainops's managed fields (see childKinds) and of their labels
//     only the one a ClusterPolicy lists its Services by.
//   - Pods are not here: the PyJob reconciler caches its workers' pods
//     alone (pyjob.WorkerPodCache), which the manager's cache adds.
//   - Nodes keep labels and capacity, not the images they hold.
func CacheOptions() cache.Options {
	managed := labels.SelectorFromSet(labels.Set{builder.LabelManagedBy: builder.ManagedBy})
	by := map[client.Object]cache.ByObject{
		&corev1.Node{}: {Transform: func(x any) (any, error) {
			if n, ok := x.(*corev1.Node); ok {
				n.SetManagedFields(nil)
				n.Status.Images = nil
			}
			return x, nil
		}},
	}
	for _, k := range childKinds {
		by[k.obj.DeepCopyObject().(client.Object)] = cache.ByObject{Label: managed, Transform: k.transform}
	}
	// Everything else (the trainops kinds themselves) keeps no managed
	// fields: no reconciler reads them. Every object's metadata shares the
	// strings all repeat (see canon). Every ChildResync, the informers
	// replay their objects: each owner is reconciled and its children
	// compared again, a safety net for a change whose event was missed.
	resync := ChildResync
	return cache.Options{ByObject: by, DefaultTransform: withoutManagedFields, SyncPeriod: &resync}
}

// cachedJob is the cache transform of Jobs. A PyJob reads its Job's
// status, suspend and backoff limit: the selector the Job controller adds
// (a map per Job) and the policies go. So do its labels: the informer
// selects Jobs by label on the API server, and a Job's owner is its
// controller reference (see owns); nothing lists the cached Jobs by label.
func cachedJob(x any) (any, error) {
	if j, ok := x.(*batchv1.Job); ok {
		j.SetManagedFields(nil)
		j.Labels = nil
		j.Spec.Template = corev1.PodTemplateSpec{}
		j.Spec.Selector, j.Spec.PodFailurePolicy, j.Spec.SuccessPolicy = nil, nil, nil
		j.Status.UncountedTerminatedPods = nil
		ShareStrings(j)
	}
	return x, nil
}

// cachedService is the cache transform of Services, kept as metadata
// only (see childKinds): of their labels only the one a ClusterPolicy
// lists its Services by; a PyJob finds its Service by name, and owns
// reads the controller reference.
func cachedService(x any) (any, error) {
	x, _ = keepOwnFieldsHash(x)
	if m, ok := x.(metav1.Object); ok {
		m.SetLabels(OnlyLabels(m.GetLabels(), builder.LabelClusterPolicy))
	}
	return x, nil
}

// OnlyLabels is labels with only keys; nil when it has none of them.
func OnlyLabels(labels map[string]string, keys ...string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := labels[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// withoutManagedFields is the cache transform of objects no reconciler
// reads the managed fields of.
func withoutManagedFields(x any) (any, error) {
	if m, ok := x.(metav1.Object); ok {
		m.SetManagedFields(nil)
		ShareStrings(m)
	}
	return x, nil
}

// ChildResync is how often every owner is reconciled even when nothing it
// watches changed.
const ChildResync = 10 * time.Minute
