// SPDX-License-Identifier: Apache-2.0

package pyjob

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
)

// +kubebuilder:rbac:groups=visibility.kueue.x-k8s.io,resources=localqueues/pendingworkloads,verbs=get

// Position is where a pending Workload waits: how many Workloads Kueue
// tries before it, in its LocalQueue and in its ClusterQueue.
type Position struct {
	LocalQueue, ClusterQueue int32
}

// QueuePositions reads the positions of a LocalQueue's pending Workloads,
// by Workload name. An error says the positions are unknown: the cluster
// does not serve Kueue's visibility API, or trainops may not read it.
type QueuePositions func(ctx context.Context, ns, localQueue string) (map[string]Position, error)

const (
	// positionsFresh is how long one read of a LocalQueue's positions
	// answers every PyJob of it: a queue of many PyJobs costs one read,
	// not one each.
	positionsFresh = 5 * time.Second
	// positionsUnknown is how long a failed read is remembered, so a
	// cluster without the visibility API is not asked at every reconcile.
	positionsUnknown = time.Minute
	// positionsKept bounds the LocalQueues remembered; past it the memory
	// starts again.
	positionsKept = 4096
	// pendingLimit is how many pending Workloads one read returns, Kueue's
	// own default: a Workload further back has no position.
	pendingLimit = 1000
)

// visibilityVersions are the versions of Kueue's visibility API tried in
// order: v1beta2 (Kueue 0.15 and later), then v1beta1 (from 0.9).
var visibilityVersions = []string{"v1beta2", "v1beta1"}

// pendingWorkloads is the part of Kueue's PendingWorkloadsSummary read,
// the same in both versions.
type pendingWorkloads struct {
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		PositionInClusterQueue int32 `json:"positionInClusterQueue"`
		PositionInLocalQueue   int32 `json:"positionInLocalQueue"`
	} `json:"items"`
}

// positionReader reads Kueue's visibility API through the API server's
// aggregation layer and remembers each LocalQueue's answer a moment.
type positionReader struct {
	client  rest.Interface
	version atomic.Int32 // index into visibilityVersions that answered last
	flight  singleflight.Group

	mu   sync.Mutex
	kept map[string]positionsRead
}

// positionsRead is one read of a LocalQueue's positions.
type positionsRead struct {
	at        time.Time
	positions map[string]Position
	err       error
}

// PositionsOf reads queue positions through mgr's API server.
func PositionsOf(mgr ctrl.Manager) (QueuePositions, error) {
	cs, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	r := &positionReader{client: cs.Discovery().RESTClient(), kept: map[string]positionsRead{}}
	return r.positions, nil
}

// positions answers from the last read of the LocalQueue when it is fresh,
// else reads it once for every caller asking meanwhile.
func (r *positionReader) positions(ctx context.Context, ns, lq string) (map[string]Position, error) {
	key := ns + "/" + lq
	now := time.Now()
	r.mu.Lock()
	last, ok := r.kept[key]
	r.mu.Unlock()
	if ok && (now.Sub(last.at) < positionsFresh || (last.err != nil && now.Sub(last.at) < positionsUnknown)) {
		return last.positions, last.err
	}
	v, _, _ := r.flight.Do(key, func() (any, error) {
		p, err := r.read(ctx, ns, lq)
		r.mu.Lock()
		if len(r.kept) >= positionsKept {
			r.kept = map[string]positionsRead{}
		}
		r.kept[key] = positionsRead{at: time.Now(), positions: p, err: err}
		r.mu.Unlock()
		return positionsRead{positions: p, err: err}, nil
	})
	got := v.(positionsRead)
	return got.positions, got.err
}

// read asks the visibility API for the LocalQueue's pending Workloads,
// trying the version that answered last first.
func (r *positionReader) read(ctx context.Context, ns, lq string) (map[string]Position, error) {
	first := int(r.version.Load())
	var err error
	for i := range visibilityVersions {
		v := (first + i) % len(visibilityVersions)
		var raw []byte
		raw, err = r.client.Get().
			AbsPath("/apis/visibility.kueue.x-k8s.io", visibilityVersions[v], "namespaces", ns, "localqueues", lq, "pendingworkloads").
			Param("limit", fmt.Sprint(pendingLimit)).
			DoRaw(ctx)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		r.version.Store(int32(v))
		return decodePositions(raw)
	}
	return nil, err
}

// decodePositions reads a PendingWorkloadsSummary. It is pure.
func decodePositions(raw []byte) (map[string]Position, error) {
	var s pendingWorkloads
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("kueue's pending workloads: %w", err)
	}
	out := make(map[string]Position, len(s.Items))
	for _, it := range s.Items {
		out[it.Metadata.Name] = Position{LocalQueue: it.PositionInLocalQueue, ClusterQueue: it.PositionInClusterQueue}
	}
	return out, nil
}
