// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/controller/children"
	"github.com/trainops/trainops/internal/textsafe"
)

// A worker that cannot start says why in its pod's container status
// alone: the Job counts it neither active-and-ready nor failed. The PyJob
// reconciler therefore watches its workers' pods, cached down to what it
// reads (name, the PyJob label, the trainer's waiting reason and message),
// and reconciles when a worker starts or stops being stuck.

// stuckReasons are the waiting reasons of a container that will not start
// by waiting: its image cannot be had, or its configuration is wrong.
var stuckReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"CreateContainerConfigError": true, "CreateContainerError": true,
}

// WorkerPodCache caches the pods of PyJobs, each down to what stuckWorker
// reads.
func WorkerPodCache() cache.ByObject {
	sel := labels.NewSelector()
	req, _ := labels.NewRequirement(builder.LabelPyJob, selection.Exists, nil)
	return cache.ByObject{Label: sel.Add(*req), Transform: func(x any) (any, error) {
		p, ok := x.(*corev1.Pod)
		if !ok {
			return x, nil
		}
		out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: children.OnlyLabels(p.Labels, builder.LabelPyJob),
		}}
		out.Status.Phase = p.Status.Phase
		if reason, msg := trainerWaiting(p); reason != "" {
			out.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: builder.TrainerContainer,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
		}
		children.ShareStrings(out)
		return out, nil
	}}
}

// trainerWaiting is the trainer container's stuck waiting reason and
// message, or "".
func trainerWaiting(p *corev1.Pod) (string, string) {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; cs.Name == builder.TrainerContainer && w != nil && stuckReasons[w.Reason] {
			// The kubelet quotes the team's image names and errors.
			return w.Reason, textsafe.Bound(textsafe.Text(w.Message), maxFailureMessage)
		}
	}
	return "", ""
}

// stuckChanged passes the pod events that change whether a worker is
// stuck, or why.
var stuckChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { r, _ := trainerWaiting(e.Object.(*corev1.Pod)); return r != "" },
	UpdateFunc: func(e event.UpdateEvent) bool {
		a, _ := trainerWaiting(e.ObjectOld.(*corev1.Pod))
		b, _ := trainerWaiting(e.ObjectNew.(*corev1.Pod))
		return a != b
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// podOwner maps a worker pod to its PyJob.
var podOwner = handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[builder.LabelPyJob]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
})

// stuckWorker says, from the cache, why a worker of the PyJob named
// name in ns cannot start ("" when none is stuck): the first such pod by
// name, its reason and the kubelet's message (which names the image).
func (r *Reconciler) stuckWorker(ctx context.Context, ns, name string) (reason, message string) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{builder.LabelPyJob: name}); err != nil {
		return "", ""
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	for i := range pods.Items {
		if reason, msg := trainerWaiting(&pods.Items[i]); reason != "" {
			return reason, fmt.Sprintf("worker pod %s cannot start: %s: %s", pods.Items[i].Name, reason, msg)
		}
	}
	return "", ""
}

// LogTail reads the end of a container's log.
type LogTail func(ctx context.Context, ns, pod, container string) (string, error)

// logTailBytes bounds the log a failed worker's account reads.
const logTailBytes = 64 << 10

// LogsOf reads container logs through mgr's API server, the end of each
// within logTailBytes.
func LogsOf(mgr ctrl.Manager) (LogTail, error) {
	cs, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, ns, pod, container string) (string, error) {
		raw, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{
			Container: container, TailLines: ptr.To[int64](200), LimitBytes: ptr.To[int64](logTailBytes),
		}).DoRaw(ctx)
		return string(raw), err
	}, nil
}
