// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	trainingv1alpha1 "github.com/trainops/trainops/api/training/v1alpha1"
	"github.com/trainops/trainops/internal/builder"
	"github.com/trainops/trainops/internal/gitops"
)

// waitSynced waits until the inventory records a successful sync of
// revision (any, when empty) attempted after since. It watches the
// inventory rather than polling it, so waiting adds no load to the API
// server that the floors do not have.
func (b *bench) waitSynced(ctx context.Context, revision string, since time.Time, timeout time.Duration) (*gitops.Inventory, error) {
	var inv *gitops.Inventory
	name := gitops.DefaultName + "-inventory"
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = "metadata.name=" + name
			return b.cs.CoreV1().ConfigMaps(inventoryNS).List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = "metadata.name=" + name
			return b.cs.CoreV1().ConfigMaps(inventoryNS).Watch(ctx, o)
		},
	}
	err := until(ctx, timeout, lw, &corev1.ConfigMap{}, func(ev watch.Event) (bool, error) {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok || ev.Type == watch.Deleted {
			return false, nil
		}
		var err error
		if inv, err = gitops.DecodeInventory(cm); err != nil {
			return false, err
		}
		if inv.LastError != "" && inv.LastAttemptedTime.After(since) {
			return false, fmt.Errorf("sync failed: %s", inv.LastError)
		}
		return inv.LastAppliedRevision != "" && (revision == "" || strings.HasSuffix(inv.LastAppliedRevision, revision)) &&
			!inv.LastAppliedTime.Before(since.Truncate(time.Second)), nil
	})
	return inv, err
}

// waitJobs waits until every PyJob's Job exists, watching Jobs (metadata
// only) rather than listing them over and over.
func (b *bench) waitJobs(ctx context.Context, timeout time.Duration) error {
	gvr := batchv1.SchemeGroupVersion.WithResource("jobs")
	sel := builder.LabelManagedBy + "=" + builder.ManagedBy
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return b.md.Resource(gvr).List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return b.md.Resource(gvr).Watch(ctx, o)
		},
	}
	seen := map[string]bool{}
	return until(ctx, timeout, lw, &metav1.PartialObjectMetadata{}, func(ev watch.Event) (bool, error) {
		m, ok := ev.Object.(*metav1.PartialObjectMetadata)
		if ok && ev.Type == watch.Added && strings.HasPrefix(m.Namespace, "bench-") {
			seen[m.Namespace+"/"+m.Name] = true
		}
		return len(seen) >= b.pyjobs, nil
	})
}

// waitStatuses waits until every PyJob has a status, watching PyJobs.
func (b *bench) waitStatuses(ctx context.Context, timeout time.Duration) error {
	dyn, err := dynamic.NewForConfig(b.env.Config)
	if err != nil {
		return err
	}
	gvr := trainingv1alpha1.GroupVersion.WithResource("pyjobs")
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			return dyn.Resource(gvr).List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			return dyn.Resource(gvr).Watch(ctx, o)
		},
	}
	seen := map[string]bool{}
	return until(ctx, timeout, lw, &unstructured.Unstructured{}, func(ev watch.Event) (bool, error) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if ok && strings.HasPrefix(u.GetNamespace(), "bench-") {
			if _, has, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); has {
				seen[u.GetNamespace()+"/"+u.GetName()] = true
			}
		}
		return len(seen) >= b.pyjobs, nil
	})
}

// until watches lw until cond holds, timeout passes or cond fails.
func until(ctx context.Context, timeout time.Duration, lw cache.ListerWatcher, obj runtime.Object, cond watchtools.ConditionFunc) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := watchtools.UntilWithSync(ctx, lw, obj, nil, cond)
	if errors.Is(err, wait.ErrWaitTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("timed out after %s", timeout)
	}
	return err
}

// requests sums apiserver_request_total over resource requests, less the
// API server's own lease renewals (not trainops's doing).
func (b *bench) requests(ctx context.Context) (float64, error) {
	m, err := b.requestsBy(ctx)
	if err != nil {
		return 0, err
	}
	total := 0.0
	for k, v := range m {
		if !strings.Contains(k, `,resource="leases"`) && !strings.Contains(k, `,resource=""`) {
			total += v
		}
	}
	return total, nil
}

// syncCount is the number of successful syncs trainops has reported on its
// metrics endpoint.
func (b *bench) syncCount() (float64, error) {
	return b.metricSum(func(l string) bool {
		return strings.HasPrefix(l, `trainops_sync_duration_seconds_count{result="success"}`)
	})
}

// metricSum adds up the samples of trainops's metrics endpoint whose line
// match picks.
func (b *bench) metricSum(match func(line string) bool) (float64, error) {
	resp, err := http.Get("http://" + b.metricsAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, l := range strings.Split(string(raw), "\n") {
		if !match(l) {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(l)[1], 64)
		if err != nil {
			return 0, err
		}
		total += v
	}
	return total, nil
}

// settled waits until the API server has seen no resource request for a
// second, and returns the count.
func (b *bench) settled(ctx context.Context) (float64, error) {
	last, err := b.requests(ctx)
	if err != nil {
		return 0, err
	}
	stable := time.Now()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		n, err := b.requests(ctx)
		if err != nil {
			return 0, err
		}
		if n != last {
			last, stable = n, time.Now()
			continue
		}
		if time.Since(stable) >= time.Second {
			return n, nil
		}
	}
	return last, nil
}

// debugRequests prints, for BENCH_DEBUG, the resource requests the API
// server served between two readings of requestsBy.
func (b *bench) debugRequests(what string, before, after map[string]float64) {
	if os.Getenv("BENCH_DEBUG") == "" {
		return
	}
	var lines []string
	total := 0.0
	for k, v := range after {
		if d := v - before[k]; d > 0 && !strings.Contains(k, `,resource=""`) {
			lines = append(lines, fmt.Sprintf("      %6.0f %s", d, k))
			total += d
		}
	}
	sort.Strings(lines)
	fmt.Printf("    %s: %.0f requests\n%s\n", what, total, strings.Join(lines, "\n"))
}

// requestsBy is apiserver_request_total by its label set.
func (b *bench) requestsBy(ctx context.Context) (map[string]float64, error) {
	out := map[string]float64{}
	raw, err := b.cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	s := bufio.NewScanner(strings.NewReader(string(raw)))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		i := strings.LastIndex(line, " ")
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] += v
		}
	}
	return out, nil
}

func poll(timeout time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
