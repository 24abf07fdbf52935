// SPDX-License-Identifier: Apache-2.0

package gitops

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Yielding is c whose writes take their turn in s as t, the reconcilers'
// ticket (Slots.Background): while a sync applies they go after its
// requests, at least one at a time. Reads are c's own. A nil s gives c.
func Yielding(c client.Client, s *Slots) client.Client {
	if s == nil {
		return c
	}
	return yielding{Client: c, t: s.Background()}
}

type yielding struct {
	client.Client
	t *Ticket
}

// turn runs write once t has a slot.
func turn(ctx context.Context, t *Ticket, write func() error) error {
	release, err := t.Acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	return write()
}

func (c yielding) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return turn(ctx, c.t, func() error { return c.Client.Create(ctx, obj, opts...) })
}

func (c yielding) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return turn(ctx, c.t, func() error { return c.Client.Update(ctx, obj, opts...) })
}

func (c yielding) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return turn(ctx, c.t, func() error { return c.Client.Patch(ctx, obj, patch, opts...) })
}

func (c yielding) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	return turn(ctx, c.t, func() error { return c.Client.Apply(ctx, obj, opts...) })
}

func (c yielding) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return turn(ctx, c.t, func() error { return c.Client.Delete(ctx, obj, opts...) })
}

func (c yielding) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	return turn(ctx, c.t, func() error { return c.Client.DeleteAllOf(ctx, obj, opts...) })
}

func (c yielding) Status() client.SubResourceWriter {
	return yieldingSub{SubResourceClient: c.Client.SubResource("status"), t: c.t}
}

func (c yielding) SubResource(sub string) client.SubResourceClient {
	return yieldingSub{SubResourceClient: c.Client.SubResource(sub), t: c.t}
}

// yieldingSub is a subresource client whose writes take their turn.
type yieldingSub struct {
	client.SubResourceClient
	t *Ticket
}

func (c yieldingSub) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return turn(ctx, c.t, func() error { return c.SubResourceClient.Create(ctx, obj, sub, opts...) })
}

func (c yieldingSub) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return turn(ctx, c.t, func() error { return c.SubResourceClient.Update(ctx, obj, opts...) })
}

func (c yieldingSub) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return turn(ctx, c.t, func() error { return c.SubResourceClient.Patch(ctx, obj, patch, opts...) })
}

func (c yieldingSub) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return turn(ctx, c.t, func() error { return c.SubResourceClient.Apply(ctx, obj, opts...) })
}
