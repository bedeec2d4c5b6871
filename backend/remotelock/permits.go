package remotelock

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"github.com/distlock/distlock/driver"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

var (
	_ driver.Semaphores      = (*Backend)(nil)
	_ driver.PermitWaiter    = (*Backend)(nil)
	_ driver.WeightedPermits = (*Backend)(nil)
)

// AcquirePermit makes one attempt to take a permit of the semaphore
// req.Key of limit permits, as Acquire takes a lock: req.Token is the
// request id, so a repeated attempt gets the same permit while it is held.
func (b *Backend) AcquirePermit(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	return b.acquireOnce(ctx, permitCalls{b.rpc, limit}, req)
}

// AcquirePermits makes one attempt to take req.Permits permits as one
// hold, as AcquirePermit takes one; refused, it leaves req.Intent in the
// service's store. errors.ErrUnsupported if that store cannot take several
// permits in one hold.
func (b *Backend) AcquirePermits(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	return b.acquireOnce(ctx, permitCalls{b.rpc, limit}, req)
}

// WithdrawPermitIntent ends the intent of a request of several permits on
// name.
func (b *Backend) WithdrawPermitIntent(ctx context.Context, name, intent string) error {
	c, err := b.begin(ctx, b.requestTimeout)
	if err != nil {
		return err
	}
	defer c.end()
	_, err = b.rpc.WithdrawPermitIntent(c.ctx, connect.NewRequest(&distlockv1.WithdrawPermitIntentRequest{Name: name, Intent: intent}))
	if err != nil {
		return b.fail(c, err)
	}
	return nil
}

// AcquirePermitWait takes a permit (req.Permits of them as one hold),
// waiting in the service until it is granted, ctx ends or Close is called,
// as AcquireWait waits for a lock.
func (b *Backend) AcquirePermitWait(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	return b.acquireWait(ctx, permitCalls{b.rpc, limit}, req)
}

// RenewPermit renews token's permit of name, an acquisition of this
// backend; driver.ErrNotHeld if it holds none.
func (b *Backend) RenewPermit(ctx context.Context, name, token string, ttl time.Duration) error {
	_, err := b.renewHold(ctx, permitCalls{rpc: b.rpc}, name, permitID(name, token), ttl)
	return err
}

// ReleasePermit frees token's permit of name, an acquisition of this
// backend; driver.ErrNotHeld if it holds none.
func (b *Backend) ReleasePermit(ctx context.Context, name, token string) error {
	return b.releaseHold(ctx, name, permitID(name, token))
}

// SetPermits stores n as the semaphore's number of permits.
func (b *Backend) SetPermits(ctx context.Context, name string, n int) error {
	c, err := b.begin(ctx, b.requestTimeout)
	if err != nil {
		return err
	}
	defer c.end()
	_, err = b.rpc.SetPermits(c.ctx, connect.NewRequest(&distlockv1.SetPermitsRequest{Name: name, Permits: int32(min(n, 1<<31-1))}))
	if err != nil {
		return b.fail(c, err)
	}
	return nil
}

// InspectPermits returns the semaphore's number of permits and its live
// permits, as the service sees them.
func (b *Backend) InspectPermits(ctx context.Context, name string) (int, []driver.Info, error) {
	c, err := b.begin(ctx, b.requestTimeout)
	if err != nil {
		return 0, nil, err
	}
	defer c.end()
	resp, err := b.rpc.InspectPermits(c.ctx, connect.NewRequest(&distlockv1.InspectPermitsRequest{Name: name}))
	if err != nil {
		return 0, nil, b.fail(c, err)
	}
	held := make([]driver.Info, 0, len(resp.Msg.GetHeld()))
	for _, l := range resp.Msg.GetHeld() {
		held = append(held, toInfo(l))
	}
	return int(resp.Msg.GetPermits()), held, nil
}

// WatchPermits fires every second until stop: the service tells of no
// permit's release, and the client waits for permits through
// AcquirePermitWait, in the service, instead.
func (b *Backend) WatchPermits(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return b.ticks(ctx, name)
}

// tickEvery is how often ticks fires.
const tickEvery = time.Second

// ticks is the Watch of a primitive the service tells nothing of: a wake
// every tickEvery until stop or ctx ends.
func (b *Backend) ticks(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateKey(name); err != nil {
		return nil, nil, err
	}
	c, err := b.begin(ctx, 0)
	if err != nil {
		return nil, nil, err
	}
	wake := make(chan struct{}, 1)
	go func() {
		defer c.end()
		t := time.NewTicker(tickEvery)
		defer t.Stop()
		for {
			select {
			case <-c.ctx.Done():
				return
			case <-t.C:
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}
	}()
	return wake, func() { c.cancel(nil) }, nil
}
