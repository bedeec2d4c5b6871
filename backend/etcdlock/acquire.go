package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

// Acquire takes req.Key only if its queue is empty, in one transaction that
// puts the entry on the condition that no other entry exists.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	dir, val := b.dir(req.Key), encodeValue(req.Token, req.Meta)
	var entry string
	t, resp, err := b.leased(ctx, req.TTL, func(id clientv3.LeaseID) (*clientv3.TxnResponse, error) {
		entry = b.entryKey(req.Key, id)
		return b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(dir), "=", 0).WithPrefix()).
			Then(clientv3.OpPut(entry, val, clientv3.WithLease(id))).
			Commit()
	})
	if err != nil {
		return driver.Grant{}, fmt.Errorf("etcdlock: acquire %q: %w", req.Key, err)
	}
	if resp.Succeeded {
		return b.granted(req.Token, entry, val, t, resp.Header.Revision, req.TTL), nil
	}
	b.leases.put(t.id, t.ttl, t.confirmed)
	return driver.Grant{}, fmt.Errorf("etcdlock: acquire %q: %w", req.Key, driver.ErrNotAcquired)
}

// leased runs txn with a lease for ttl. If a reused lease turned out to be
// gone (revoked behind the backend's back), it retries once with a new one.
func (b *Backend) leased(ctx context.Context, ttl time.Duration, txn func(clientv3.LeaseID) (*clientv3.TxnResponse, error)) (*ticket, *clientv3.TxnResponse, error) {
	for fresh := false; ; fresh = true {
		t, err := b.leases.take(ctx, ttl, fresh)
		if err != nil {
			return nil, nil, fmt.Errorf("lease: %w", err)
		}
		resp, err := txn(t.id)
		_ = t.settle() // a failed refresh leaves confirmed at the lease's last confirmation
		if err != nil && t.reused && !fresh && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			continue
		}
		return t, resp, err
	}
}

// AcquireWait queues for req.Key and returns once every entry created before
// its own is gone. While it waits it watches only the entry just before its
// own and keeps its lease alive; if ctx ends it revokes the lease, which
// deletes its entry.
func (b *Backend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	w := &waiter{b: b, key: req.Key, dir: b.dir(req.Key)}
	val := encodeValue(req.Token, req.Meta)
	var err error
	w.t, w.pos, err = w.enqueue(ctx, val, req.TTL)
	if err == nil {
		err = w.wait(ctx)
	}
	if err != nil {
		if w.t != nil {
			w.abandon()
		}
		if ctx.Err() != nil {
			return driver.Grant{}, errors.Join(fmt.Errorf("etcdlock: lock %q: %w", req.Key, driver.ErrNotAcquired), ctx.Err())
		}
		return driver.Grant{}, fmt.Errorf("etcdlock: lock %q: %w", req.Key, err)
	}
	if time.Until(w.t.expiry()) < req.TTL-req.TTL/8 {
		// Hand the holder (nearly) its full lease, not what is left of it.
		_ = b.leases.keepAlive(ctx, w.t)
	}
	return b.granted(req.Token, w.entry, val, w.t, w.myRev, req.TTL), nil
}

// holding is an acquisition this backend made and has not released.
type holding struct {
	entry string
	value string // the token is in it: comparing it is comparing the token
	lease clientv3.LeaseID
	ttl   int64
	lost  context.Context    // done when the store dropped the hold
	lose  context.CancelFunc // ends lost

	cancel context.CancelFunc // ends the loss watch once it runs
	watch  *time.Timer        // starts the loss watch

	confirmed time.Time // guarded by Backend.mu
}

// stop ends the hold's loss watch, whether it has started or not.
func (h *holding) stop(b *Backend) {
	h.cancel()
	if h.watch.Stop() {
		b.bg.Done() // it never started
	}
}

// lossWatchDelay is how long a hold lasts before its loss watch starts. The
// watch replays from the grant's revision, so a deletion meanwhile is still
// reported, at most this late; short holds never pay for a watch.
const lossWatchDelay = 100 * time.Millisecond

// granted records a grant and, unless it is released first, watches its
// entry: the entry's deletion (lease expiry or revocation, an operator)
// ends Grant.Lost. The watch starts on a timer, so a short hold costs no
// goroutine.
func (b *Backend) granted(token, entry, value string, t *ticket, rev int64, ttl time.Duration) driver.Grant {
	ctx, cancel := context.WithCancel(holdWatchContext)
	h := &holding{entry: entry, value: value, lease: t.id, ttl: t.ttl, cancel: cancel, confirmed: t.confirmed}
	h.lost, h.lose = context.WithCancel(context.Background())
	g := driver.Grant{Fence: uint64(rev), Lost: h.lost, Sent: t.sent(ttl)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		cancel()
		h.lose()
		return g
	}
	b.held[token] = h
	b.bg.Add(1)
	h.watch = time.AfterFunc(lossWatchDelay, func() {
		defer b.bg.Done()
		if ctx.Err() == nil && b.watchDeleted(ctx, entry, rev) {
			b.mu.Lock()
			if b.held[token] == h {
				delete(b.held, token) // the client sends no release for a lock the store dropped
			}
			b.mu.Unlock()
			h.lose()
		}
	})
	return g
}

// forget drops token's record and stops its watch; it returns nil if this
// backend did not make the acquisition.
func (b *Backend) forget(token string) *holding {
	b.mu.Lock()
	h := b.held[token]
	delete(b.held, token)
	b.mu.Unlock()
	if h != nil {
		h.stop(b)
	}
	return h
}
