// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// YieldWrites is how many of the reconcilers' writes are in flight at
// most while a sync writes: enough that every team's reconciles move.
const YieldWrites = 2

// Yield lets the syncs' writes go before the reconcilers': while any sync
// of the process applies, the reconcilers' writes and the Events (a
// client made with Yielding) go YieldWrites at a time, the next turn to
// the namespace whose write went the longest ago (one team's queued
// writes never stand before another's single one), in the order asked
// within a namespace; with no sync applying they go at once. The syncs themselves are not
// slowed: their requests never wait here. A sync's own new objects wait
// for it anyway (the hold); what gives way is the children of the
// objects other syncs applied, whose writes otherwise compete on a busy
// API server with the syncs still applying (docs/design.md, "The
// reconcilers give way to the syncs").
type Yield struct {
	mu       sync.Mutex
	limit    int
	applying int // syncs writing
	inflight int // reconcilers' writes counted against limit
	waiting  []*yieldWaiter
	// turns counts the writes let through while syncs write; served is
	// each namespace's last turn (dropped when no sync writes).
	turns  uint64
	served map[string]uint64
}

// yieldWaiter is one write waiting for its turn; ready is sent whether it
// counts against the limit.
type yieldWaiter struct {
	namespace string
	ready     chan bool
}

// NewYield lets limit of the reconcilers' writes through at once while a
// sync writes (at least one).
func NewYield(limit int) *Yield { return &Yield{limit: max(limit, 1)} }

// Applying says a sync writes, until the function it returns is called.
// A nil Yield does nothing.
func (y *Yield) Applying() (done func()) {
	if y == nil {
		return func() {}
	}
	y.mu.Lock()
	y.applying++
	y.mu.Unlock()
	return func() {
		y.mu.Lock()
		defer y.mu.Unlock()
		if y.applying--; y.applying > 0 {
			return
		}
		// No sync writes any more: whatever waits goes, uncounted.
		for _, w := range y.waiting {
			w.ready <- false
		}
		y.waiting, y.served = nil, nil
	}
}

// acquire waits for a reconciler's write into namespace ("" for a
// cluster-scoped object) to go, and returns what to call once it is done;
// it fails only when ctx ends first.
func (y *Yield) acquire(ctx context.Context, namespace string) (release func(), err error) {
	if y == nil {
		return func() {}, nil
	}
	y.mu.Lock()
	switch {
	case y.applying == 0:
		y.mu.Unlock()
		return func() {}, nil
	case y.inflight < y.limit && len(y.waiting) == 0:
		y.letThrough(namespace)
		y.mu.Unlock()
		return y.release, nil
	}
	w := &yieldWaiter{namespace: namespace, ready: make(chan bool, 1)}
	y.waiting = append(y.waiting, w)
	y.mu.Unlock()
	select {
	case counted := <-w.ready:
		if counted {
			return y.release, nil
		}
		return func() {}, nil
	case <-ctx.Done():
		y.mu.Lock()
		defer y.mu.Unlock()
		if i := slices.Index(y.waiting, w); i >= 0 {
			y.waiting = slices.Delete(y.waiting, i, i+1)
			return nil, context.Cause(ctx)
		}
		// It was let through meanwhile: let the next one through instead.
		if <-w.ready {
			y.releaseLocked()
		}
		return nil, context.Cause(ctx)
	}
}

func (y *Yield) release() {
	y.mu.Lock()
	defer y.mu.Unlock()
	y.releaseLocked()
}

// releaseLocked ends a counted write and lets the next waiting one
// through: the first waiting of the namespace whose last turn is the
// oldest. Under y.mu.
func (y *Yield) releaseLocked() {
	y.inflight--
	if len(y.waiting) == 0 || y.inflight >= y.limit {
		return
	}
	next := 0
	for i, w := range y.waiting {
		if y.served[w.namespace] < y.served[y.waiting[next].namespace] {
			next = i
		}
	}
	w := y.waiting[next]
	y.waiting = slices.Delete(y.waiting, next, next+1)
	y.letThrough(w.namespace)
	w.ready <- true
}

// letThrough counts a write of namespace against the limit, as its turn.
// Under y.mu.
func (y *Yield) letThrough(namespace string) {
	y.inflight++
	y.turns++
	if y.served == nil {
		y.served = map[string]uint64{}
	}
	y.served[namespace] = y.turns
}

// Yielding is c whose writes give way to the syncs' through y (see
// Yield); reads are c's own. A nil y gives c.
func Yielding(c client.Client, y *Yield) client.Client {
	if y == nil {
		return c
	}
	return yielding{Client: c, y: y}
}

// applyNamespace is the namespace an apply configuration names, or "".
func applyNamespace(obj runtime.ApplyConfiguration) string {
	if o, ok := obj.(interface{ GetNamespace() *string }); ok && o.GetNamespace() != nil {
		return *o.GetNamespace()
	}
	return ""
}

type yielding struct {
	client.Client
	y *Yield
}

// turn runs write, of an object of namespace, once y lets it through.
func turn(ctx context.Context, y *Yield, namespace string, write func() error) error {
	release, err := y.acquire(ctx, namespace)
	if err != nil {
		return err
	}
	defer release()
	return write()
}

func (c yielding) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return turn(ctx, c.y, obj.GetNamespace(), func() error { return c.Client.Create(ctx, obj, opts...) })
}

func (c yielding) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return turn(ctx, c.y, obj.GetNamespace(), func() error { return c.Client.Update(ctx, obj, opts...) })
}

func (c yielding) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return turn(ctx, c.y, obj.GetNamespace(), func() error { return c.Client.Patch(ctx, obj, patch, opts...) })
}

func (c yielding) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	return turn(ctx, c.y, applyNamespace(obj), func() error { return c.Client.Apply(ctx, obj, opts...) })
}

func (c yielding) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return turn(ctx, c.y, obj.GetNamespace(), func() error { return c.Client.Delete(ctx, obj, opts...) })
}

func (c yielding) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	return turn(ctx, c.y, obj.GetNamespace(), func() error { return c.Client.DeleteAllOf(ctx, obj, opts...) })
}

func (c yielding) Status() client.SubResourceWriter {
	return yieldingSub{SubResourceClient: c.Client.SubResource("status"), y: c.y}
}

func (c yielding) SubResource(sub string) client.SubResourceClient {
	return yieldingSub{SubResourceClient: c.Client.SubResource(sub), y: c.y}
}

// yieldingSub is a subresource client whose writes take their turn.
type yieldingSub struct {
	client.SubResourceClient
	y *Yield
}

func (c yieldingSub) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return turn(ctx, c.y, obj.GetNamespace(), func() error { return c.SubResourceClient.Create(ctx, obj, sub, opts...) })
}

func (c yieldingSub) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return turn(ctx, c.y, obj.GetNamespace(), func() error { return c.SubResourceClient.Update(ctx, obj, opts...) })
}

func (c yieldingSub) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return turn(ctx, c.y, obj.GetNamespace(), func() error { return c.SubResourceClient.Patch(ctx, obj, patch, opts...) })
}

func (c yieldingSub) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return turn(ctx, c.y, applyNamespace(obj), func() error { return c.SubResourceClient.Apply(ctx, obj, opts...) })
}
