package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

// entryOf finds token's entry for key: from h, this backend's record of
// the acquisition, or, if h is nil, by reading key's queue. cond holds as
// long as the entry is the one made for that acquisition: its create
// revision names it, through the puts that a move to another lease and a
// downgrade (rwlock.go) make, neither of which changes its token.
func (b *Backend) entryOf(ctx context.Context, h *holding, key, token string) (entry string, lease clientv3.LeaseID, cond clientv3.Cmp, err error) {
	if h != nil {
		b.mu.Lock()
		lease = h.lease
		b.mu.Unlock()
		return h.entry, lease, clientv3.Compare(clientv3.CreateRevision(h.entry), "=", h.rev), nil
	}
	resp, err := b.cli.Get(ctx, b.dir(key), clientv3.WithPrefix())
	if err != nil {
		return "", 0, clientv3.Cmp{}, err
	}
	for _, kv := range resp.Kvs {
		if v, err := decodeValue(kv.Value); err == nil && v.Token == token {
			k := string(kv.Key)
			return k, clientv3.LeaseID(kv.Lease), clientv3.Compare(clientv3.CreateRevision(k), "=", kv.CreateRevision), nil
		}
	}
	return "", 0, clientv3.Cmp{}, driver.ErrNotHeld
}

// linearizable is an operation that makes a transaction of comparisons
// alone a linearizable read: etcd serves a transaction with no operation
// from whichever member gets it, without asking the leader, so that a
// member behind the leader finds a fresh entry missing, or a deleted one
// still there. It counts key, and reads nothing.
func linearizable(key string) clientv3.Op {
	return clientv3.OpGet(key, clientv3.WithCountOnly())
}

// Release deletes token's entry, holder or waiter. An acquisition this
// backend made is deleted by name: the entry is named by the hold's first
// lease, which nothing else uses while the entry lives (a lease the entry
// moved away from is revoked, never pooled; see move). Any other entry is
// deleted in a transaction that first checks it still carries the token. The
// lease the entry was on is kept for reuse if this backend made the
// acquisition, and revoked otherwise.
func (b *Backend) Release(ctx context.Context, key, token string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	b.mu.Lock()
	h := b.holdingOf(key, token)
	b.mu.Unlock()
	var (
		entry string
		lease clientv3.LeaseID
		err   error
	)
	if h != nil {
		entry = h.entry
		var deleted bool
		deleted, err = b.releaseHeld(ctx, key, h)
		if err == nil && !deleted {
			err = driver.ErrNotHeld
		}
	} else {
		var cond clientv3.Cmp
		entry, lease, cond, err = b.entryOf(ctx, nil, key, token)
		if err == nil {
			var resp *clientv3.TxnResponse
			resp, err = b.batch.txn(ctx, entryDir(entry), len(entry), []clientv3.Cmp{cond}, []clientv3.Op{clientv3.OpDelete(entry)}, nil)
			if err == nil && !resp.Succeeded {
				err = driver.ErrNotHeld
			}
		}
	}
	if err != nil && !errors.Is(err, driver.ErrNotHeld) {
		return b.fail(err) // retried by token
	}
	kept := b.forget(key, token) != nil
	if err != nil {
		return err
	}
	if h != nil {
		// Read only now: a move that finished meanwhile has recorded the
		// lease the deleted entry was on, and revokes the one before.
		b.mu.Lock()
		var sec int64
		var confirmed time.Time
		lease, sec, confirmed = h.lease, h.ttl, h.confirmed
		b.mu.Unlock()
		if kept {
			b.leases.put(lease, sec, confirmed)
			return nil
		}
	}
	_, _ = b.cli.Revoke(ctx, lease) // nothing else is on it; failing that, it expires
	return nil
}

// releaseHeld deletes the entry of h, an acquisition this backend made, in
// one transaction that keeps the queue's keys: if no waiter has queued (no
// tail key), the entry goes alone; if the entry is the queue's newest, so
// that no waiter is behind it, the tail and released keys go with it;
// otherwise the released key records the entry's create revision, on
// the entry's lease, which tells its successor that it is first (see
// waiter.check). It reports whether the entry was there.
func (b *Backend) releaseHeld(ctx context.Context, key string, h *holding) (bool, error) {
	b.mu.Lock()
	lease := h.lease
	b.mu.Unlock()
	tail, released := b.tailKey(key), b.releasedKey(key)
	resp, err := b.batch.txn(ctx, entryDir(h.entry), len(h.entry)+len(released),
		[]clientv3.Cmp{noTail(tail)},
		[]clientv3.Op{clientv3.OpDelete(h.entry)}, // nobody queued behind it
		[]clientv3.Op{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(tail), "=", h.rev)},
			[]clientv3.Op{clientv3.OpDelete(h.entry), clientv3.OpDelete(tail), clientv3.OpDelete(released)},
			[]clientv3.Op{clientv3.OpTxn(
				// The lease must be the entry's for the put to be valid;
				// after a move whose outcome is unknown it may not be.
				[]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(h.entry), "=", lease)},
				[]clientv3.Op{clientv3.OpDelete(h.entry), clientv3.OpPut(released, strconv.FormatInt(h.rev, 10), clientv3.WithLease(lease))},
				[]clientv3.Op{clientv3.OpDelete(h.entry)},
			)},
		)})
	if err != nil {
		return false, err
	}
	del := resp.Responses[0]
	for n := del.GetResponseTxn(); n != nil; n = del.GetResponseTxn() {
		del = n.Responses[0] // each branch begins with the entry's delete, or a branch
	}
	return del.GetResponseDeleteRange().Deleted > 0, nil
}

// Renew confirms that token's entry exists and renews its lease. If ttl,
// rounded up to whole seconds, is not the TTL of the lease the entry is on
// (Lock.Extend), the entry moves to a lease of that TTL instead (see move).
// The move is made for an acquisition this backend made; an entry it did not
// make is moved only when its lease is shorter than ttl.
func (b *Backend) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	sec := ttlSeconds(ttl)
	b.mu.Lock()
	h := b.holdingOf(key, token)
	b.mu.Unlock()
	if h != nil {
		h.renewing.Lock()
		defer h.renewing.Unlock()
		b.mu.Lock()
		moving := h.ttl != sec || len(h.stray) > 0
		b.mu.Unlock()
		if moving {
			return b.move(ctx, key, token, h, ttl)
		}
	}
	entry, lease, cond, err := b.entryOf(ctx, h, key, token)
	if err == nil {
		var resp *clientv3.TxnResponse
		resp, err = b.cli.Txn(ctx).If(cond).Then(linearizable(entry)).Commit()
		if err == nil && !resp.Succeeded {
			err = driver.ErrNotHeld
		}
	}
	if err != nil {
		return b.fail(err)
	}
	sent := time.Now()
	left, err := b.leases.renew.keepAlive(ctx, lease)
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("%w: lease expired", driver.ErrNotHeld)
		}
		return b.fail(err)
	}
	if h == nil {
		if left < sec {
			return b.moveOther(ctx, key, entry, lease, cond, ttl)
		}
		return nil
	}
	b.mu.Lock()
	h.confirmed = sent
	b.mu.Unlock()
	return nil
}

// move puts h's entry on a lease of ttl, for a Renew whose ttl is not that of
// the entry's lease, or after a move whose outcome is unknown. h.renewing is
// held.
//
// The target lease is confirmed first (a spare one renewed, or a new one),
// so that the store keeps the entry for ttl from this Renew on whether or
// not the move turns out to have happened. The move is one transaction that
// puts a new lease on the entry, keeping its value, if it still has the
// hold's create revision; a Put keeps a key's create revision, so the fence
// and the place in the queue stay, and the loss watch, which ignores puts,
// goes on.
// Only then is the old lease, which nothing is on any more, revoked: the
// entry keeps the name of its first lease, so that lease must never return
// to the pool while the entry lives.
//
// A move that fails with an unknown outcome leaves its lease recorded as a
// stray; the next Renew moves the entry again (back to the hold's lease if
// ttl is that lease's) and revokes the strays once that succeeds.
func (b *Backend) move(ctx context.Context, key, token string, h *holding, ttl time.Duration) error {
	sec := ttlSeconds(ttl)
	b.mu.Lock()
	old, oldTTL, oldConfirmed := h.lease, h.ttl, h.confirmed
	b.mu.Unlock()
	var (
		t   *ticket
		err error
	)
	if sec == oldTTL {
		t = &ticket{id: old, ttl: oldTTL, confirmed: oldConfirmed}
		if err = b.leases.keepAlive(ctx, t); errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("%w: lease expired", driver.ErrNotHeld)
		}
	} else {
		t, err = b.confirmedLease(ctx, ttl)
	}
	if err != nil {
		return b.fail(fmt.Errorf("lease: %w", err))
	}
	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.entry), "=", h.rev)).
		Then(clientv3.OpPut(h.entry, "", clientv3.WithIgnoreValue(), clientv3.WithLease(t.id))).
		Commit()
	switch {
	case err != nil:
		if t.id != old {
			b.mu.Lock()
			if b.holdingOf(key, token) == h {
				h.stray = append(h.stray, t.id)
			}
			b.mu.Unlock()
		}
		return b.fail(err)
	case !resp.Succeeded:
		if t.id != old {
			b.leases.put(t.id, t.ttl, t.confirmed) // the entry never got on it
		}
		return driver.ErrNotHeld
	}
	var drop []clientv3.LeaseID
	b.mu.Lock()
	if b.holdingOf(key, token) == h {
		drop = append(h.stray, old)
		h.lease, h.ttl, h.confirmed, h.stray = t.id, t.ttl, t.confirmed, nil
	}
	// Otherwise the hold was released, lost or closed meanwhile: Release
	// pooled the lease it read, and the other one expires by itself.
	b.mu.Unlock()
	for _, id := range drop {
		if id != t.id {
			_, _ = b.cli.Revoke(ctx, id) // nothing is on it; failing that, it expires
		}
	}
	return nil
}

// moveOther puts an entry this backend did not make, on lease and found by
// cond, on a lease of ttl, and revokes its old lease: the backend that made
// it then sees it lost at its next renewal rather than keeping a lease alive
// that the entry is no longer on.
func (b *Backend) moveOther(ctx context.Context, key, entry string, lease clientv3.LeaseID, cond clientv3.Cmp, ttl time.Duration) error {
	t, err := b.confirmedLease(ctx, ttl)
	if err != nil {
		return b.fail(fmt.Errorf("lease: %w", err))
	}
	resp, err := b.cli.Txn(ctx).If(cond).
		Then(clientv3.OpPut(entry, "", clientv3.WithIgnoreValue(), clientv3.WithLease(t.id))).
		Commit()
	switch {
	case err != nil:
		return b.fail(err) // the entry may be on either lease: both expire by themselves
	case !resp.Succeeded:
		b.leases.put(t.id, t.ttl, t.confirmed)
		return driver.ErrNotHeld
	}
	_, _ = b.cli.Revoke(ctx, lease)
	return nil
}

// confirmedLease returns a lease of ttl confirmed after the call began: a
// spare one with a keepalive, or a new one.
func (b *Backend) confirmedLease(ctx context.Context, ttl time.Duration) (*ticket, error) {
	start := time.Now()
	for fresh := false; ; fresh = true {
		t, err := b.leases.take(ctx, ttl, fresh)
		if err != nil {
			return nil, err
		}
		if err = t.settle(); err == nil && t.confirmed.Before(start) {
			err = b.leases.keepAlive(ctx, t)
		}
		switch {
		case err == nil:
			return t, nil
		case t.reused && errors.Is(err, rpctypes.ErrLeaseNotFound):
			if !fresh {
				continue // revoked behind the backend's back
			}
		case t.reused:
			b.leases.put(t.id, t.ttl, t.confirmed) // still spare
		}
		return nil, err
	}
}

// Inspect reports the holder of key: the entry with the lowest create
// revision. A free key's last fence is not kept (Info.Fence is 0).
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := b.ready(ctx); err != nil {
		return driver.Info{}, err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	kv, err := b.holder(ctx, key)
	if err != nil || kv == nil {
		return driver.Info{Key: key}, err
	}
	return b.info(ctx, key, kv)
}

// holder returns key's holder entry, the one with the lowest create
// revision, or nil if the key is free.
func (b *Backend) holder(ctx context.Context, key string) (*mvccpb.KeyValue, error) {
	kv, err := b.firstEntry(ctx, key)
	if err != nil {
		return nil, b.fail(err)
	}
	return kv, nil
}

// firstEntry is holder with the store's own error.
func (b *Backend) firstEntry(ctx context.Context, key string) (*mvccpb.KeyValue, error) {
	resp, err := b.cli.Get(ctx, b.dir(key), clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		return nil, err
	}
	return resp.Kvs[0], nil
}

func (b *Backend) info(ctx context.Context, key string, kv *mvccpb.KeyValue) (driver.Info, error) {
	v, err := decodeValue(kv.Value)
	if err != nil {
		return driver.Info{}, err
	}
	info := driver.Info{Key: key, Held: true, Fence: uint64(kv.CreateRevision), Meta: v.Meta}
	ttl, err := b.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		return driver.Info{}, b.fail(fmt.Errorf("lease: %w", err))
	}
	info.TTL = time.Duration(max(ttl.TTL, 0)) * time.Second
	return info, nil
}

// ForceRelease deletes key's holder entry, whatever token it carries, in a
// transaction that checks it is still the entry it read (by create
// revision), then revokes that entry's lease, which nothing else uses. The
// next waiter is granted through its watch, as after a Release. It returns
// what the store knew of the hold it ended, or an error matching
// driver.ErrNotHeld if key was free. The old holder's Renew and Release then
// get driver.ErrNotHeld and free nothing; its backend's watch ends the
// hold's Grant.Lost.
func (b *Backend) ForceRelease(ctx context.Context, key string, _ driver.ForceOptions) (driver.Info, error) {
	if err := b.ready(ctx); err != nil {
		return driver.Info{}, err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	for {
		kv, err := b.holder(ctx, key)
		if err != nil {
			return driver.Info{}, err
		}
		if kv == nil {
			return driver.Info{}, driver.ErrNotHeld
		}
		info, err := b.info(ctx, key, kv)
		if err != nil {
			return driver.Info{}, err
		}
		entry := string(kv.Key)
		resp, err := b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(entry), "=", kv.CreateRevision)).
			Then(clientv3.OpDelete(entry)).
			Commit()
		if err != nil {
			return driver.Info{}, b.fail(err)
		}
		if resp.Succeeded {
			_, _ = b.cli.Revoke(ctx, clientv3.LeaseID(kv.Lease)) // failing that, it expires
			return info, nil
		}
		// That holder released meanwhile: look at the next one, within ctx.
	}
}
