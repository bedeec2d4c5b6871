package remotelock

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"github.com/distlock/distlock/driver"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

var (
	_ driver.RWLocks      = (*Backend)(nil)
	_ driver.RWWaiter     = (*Backend)(nil)
	_ driver.RWDowngrader = (*Backend)(nil)
)

// AcquireRW makes one attempt to take req.Key in mode, as Acquire takes a
// lock; a writer's refused attempt with req.Intent records the intent in
// the service, which keeps new readers out.
func (b *Backend) AcquireRW(ctx context.Context, req driver.AcquireRequest, mode driver.Mode) (driver.Grant, error) {
	return b.acquireOnce(ctx, rwCalls{b.rpc, mode}, req)
}

// AcquireRWWait takes req.Key in mode, waiting in the service until it is
// granted, ctx ends or Close is called, as AcquireWait waits for a lock. A
// writer's wait keeps new readers out under req.Intent, which the client
// withdraws if the wait fails.
func (b *Backend) AcquireRWWait(ctx context.Context, req driver.AcquireRequest, mode driver.Mode) (driver.Grant, error) {
	return b.acquireWait(ctx, rwCalls{b.rpc, mode}, req)
}

// RenewRW renews token's hold of name, an acquisition of this backend, of
// either mode; driver.ErrNotHeld if it has none.
func (b *Backend) RenewRW(ctx context.Context, name, token string, ttl time.Duration) error {
	_, err := b.renewHold(ctx, rwCalls{rpc: b.rpc}, name, rwID(name, token), ttl)
	return err
}

// ReleaseRW frees token's hold of name, an acquisition of this backend;
// driver.ErrNotHeld if it has none.
func (b *Backend) ReleaseRW(ctx context.Context, name, token string) error {
	return b.releaseHold(ctx, name, rwID(name, token))
}

// WithdrawIntent ends a writer's intent on name.
func (b *Backend) WithdrawIntent(ctx context.Context, name, intent string) error {
	c, err := b.begin(ctx, b.requestTimeout)
	if err != nil {
		return err
	}
	defer c.end()
	_, err = b.rpc.WithdrawIntent(c.ctx, connect.NewRequest(&distlockv1.WithdrawIntentRequest{Name: name, Intent: intent}))
	if err != nil {
		return b.fail(c, err)
	}
	return nil
}

// DowngradeRW turns token's write hold of name, an acquisition of this
// backend, into a read hold, in the service's store; driver.ErrNotHeld if
// it has none, errors.ErrUnsupported if the store cannot downgrade or the
// service is of a release without downgrades.
func (b *Backend) DowngradeRW(ctx context.Context, name, token string) error {
	c, err := b.begin(ctx, b.requestTimeout)
	if err != nil {
		return err
	}
	defer c.end()
	server, ok := b.serverToken(rwID(name, token))
	if !ok {
		return driver.ErrNotHeld
	}
	_, err = b.rpc.DowngradeRW(c.ctx, connect.NewRequest(&distlockv1.DowngradeRWRequest{Name: name, Token: server}))
	if err != nil {
		return b.fail(c, err)
	}
	return nil
}

// InspectRW reports the lock's holds and waiting writers, as the service
// sees them.
func (b *Backend) InspectRW(ctx context.Context, name string) (driver.Mode, []driver.Info, int, error) {
	c, err := b.begin(ctx, b.requestTimeout)
	if err != nil {
		return driver.Shared, nil, 0, err
	}
	defer c.end()
	resp, err := b.rpc.InspectRW(c.ctx, connect.NewRequest(&distlockv1.InspectRWRequest{Name: name}))
	if err != nil {
		return driver.Shared, nil, 0, b.fail(c, err)
	}
	mode := driver.Shared
	if resp.Msg.GetWriter() {
		mode = driver.Exclusive
	}
	held := make([]driver.Info, 0, len(resp.Msg.GetHeld()))
	for _, l := range resp.Msg.GetHeld() {
		held = append(held, toInfo(l))
	}
	return mode, held, int(resp.Msg.GetWritersWaiting()), nil
}

// WatchRW fires every second until stop: the client waits for holds
// through AcquireRWWait, in the service, instead.
func (b *Backend) WatchRW(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return b.ticks(ctx, name)
}
