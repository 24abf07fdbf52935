// SPDX-License-Identifier: Apache-2.0

package remediation

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/trainops/trainops/api/gpu/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/gpuhealth"
)

// scrapeParallel is how many exporters one pass reads at once.
const scrapeParallel = 8

// exporterTarget is one exporter pod to read, for one node.
type exporterTarget struct {
	node, url string
	ready     bool
}

// exporterTargets finds the exporter pods through the exporter Service's
// EndpointSlices, one per node. Only what the policy's own objects vouch
// for is read: a slice the endpointslice controller made for the policy's
// Service (its controller reference), an endpoint naming a pod of the
// policy's exporter DaemonSet, on the node the endpoint says, at the
// pod's own address. Anything else wearing the Service's label is
// ignored, so no one can point trainops's requests elsewhere.
//
// A node kwok simulates (annotated kwok.x-k8s.io/node=fake) runs no
// container: its pods' addresses are made up, and nothing is sent to them.
func (r *Reconciler) exporterTargets(ctx context.Context, cp *gpuv1alpha1.ClusterPolicy, simulated map[string]bool) ([]exporterTarget, error) {
	ns := cp.Spec.Namespace
	svc, ds := &corev1.Service{}, &appsv1.DaemonSet{}
	for _, obj := range []client.Object{svc, ds} {
		key := client.ObjectKey{Namespace: ns, Name: builder.DCGMExporterService}
		if obj == ds {
			key.Name = builder.DCGMExporterDaemonSet
		}
		if err := r.Live().Get(ctx, key, obj); apierrors.IsNotFound(err) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("read %s: %w", key, err)
		}
		if obj.GetLabels()[builder.LabelClusterPolicy] != cp.Name {
			return nil, nil
		}
	}
	var endpointSlices discoveryv1.EndpointSliceList
	if err := r.Live().List(ctx, &endpointSlices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: builder.DCGMExporterService}); err != nil {
		return nil, fmt.Errorf("list the exporter's EndpointSlices: %w", err)
	}
	var pods corev1.PodList
	if err := r.Live().List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": builder.DCGMExporterDaemonSet}); err != nil {
		return nil, fmt.Errorf("list the exporter's pods: %w", err)
	}
	ours := map[string]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if owner := metav1.GetControllerOfNoCopy(p); owner != nil && owner.UID == ds.UID {
			ours[p.Name] = p
		}
	}
	var out []exporterTarget
	for _, s := range endpointSlices.Items {
		if owner := metav1.GetControllerOfNoCopy(&s); owner == nil || owner.UID != svc.UID {
			continue
		}
		port := slicePort(s)
		for _, ep := range s.Endpoints {
			if t, ok := targetOf(ep, ours, port); ok && (!simulated[t.node] || r.ReadSimulatedNodes) {
				out = append(out, t)
			}
		}
	}
	return out, nil
}

func slicePort(s discoveryv1.EndpointSlice) int32 {
	for _, p := range s.Ports {
		if p.Name != nil && *p.Name == builder.DCGMExporterPortName && p.Port != nil {
			return *p.Port
		}
	}
	return 0
}

// targetOf is the exporter an endpoint stands for, when it names one of
// ours, at its own address and on its own node.
func targetOf(ep discoveryv1.Endpoint, ours map[string]*corev1.Pod, port int32) (exporterTarget, bool) {
	if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" || ep.NodeName == nil || port == 0 {
		return exporterTarget{}, false
	}
	p, ok := ours[ep.TargetRef.Name]
	if !ok || p.UID != ep.TargetRef.UID || p.Spec.NodeName != *ep.NodeName || p.Status.PodIP == "" || !slices.Contains(ep.Addresses, p.Status.PodIP) {
		return exporterTarget{}, false
	}
	ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
	url := "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))) + "/metrics"
	return exporterTarget{node: p.Spec.NodeName, url: url, ready: ready}, true
}

// scrapeTimeout is how long one exporter may take to answer.
func scrapeTimeout(interval time.Duration) time.Duration {
	return min(interval/2, 10*time.Second)
}

// httpClient reads exporters: no proxy, no redirect followed, every
// request bounded by the scrape timeout.
func (r *Reconciler) httpClient(timeout time.Duration) *http.Client {
	dial := r.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: timeout}).DialContext
	}
	return &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true, ResponseHeaderTimeout: timeout},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("the exporter answered with a redirect, which is not followed")
		},
	}
}

// exporterHealth reads every target at once, a few at a time, and
// classifies each node's readings. A node whose exporter is not ready,
// does not answer, or answers what is not its format, is unknown.
func (r *Reconciler) exporterHealth(ctx context.Context, targets []exporterTarget, interval time.Duration, th gpuhealth.Thresholds) map[string]nodeHealth {
	out := map[string]nodeHealth{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, scrapeParallel)
	timeout := scrapeTimeout(interval)
	hc := r.httpClient(timeout)
	for _, t := range targets {
		if !t.ready {
			mu.Lock()
			out[t.node] = nodeHealth{health: healthUnknown, unknown: "its DCGM exporter pod is not ready"}
			mu.Unlock()
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			sctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			gpus, err := gpuhealth.ScrapeDCGM(sctx, hc, t.url)
			h := classifyScrape(gpus, err, th)
			mu.Lock()
			out[t.node] = h
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// classifyScrape turns one scrape (its readings or its error) into a
// node's exporter health under the thresholds.
func classifyScrape(gpus []gpuhealth.GPU, err error, th gpuhealth.Thresholds) nodeHealth {
	if err != nil {
		return nodeHealth{health: healthUnknown, unknown: "its DCGM exporter: " + err.Error()}
	}
	if !slices.ContainsFunc(gpus, func(g gpuhealth.GPU) bool { return g.HasXID }) {
		return nodeHealth{health: healthUnknown, unknown: "its DCGM exporter reported no GPU's " + gpuhealth.MetricXID}
	}
	return healthOf(gpuhealth.Classify(gpus, th))
}
