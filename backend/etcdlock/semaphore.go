package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

// Semaphores and read-write locks keep their entries in queues of the same
// shape as a lock's (see keys.go), under internal names that start with a
// NUL byte: driver.ValidateKey refuses control characters, so no lock's key
// is ever one of them, and no lock's directory can hold their entries. For
// a semaphore S:
//
//	PREFIX/%00sem%00esc(S)%00p/LEASE   a permit, on its own lease, as a lock's entry
//	PREFIX/%00sem%00esc(S)%00limit     the number of permits, without a lease
//
// and the read-write locks' layout is in rwlock.go. The common prefix
// PREFIX/%00sem%00esc(S)%00 belongs to S alone (another valid name cannot
// continue esc(S) with %00), so one watch on it sees S's releases and limit
// changes and nothing else's.
//
// A permit is held like a lock, through the same code: Renew and Release
// by token on its entry, a move to another lease on Extend, a loss watch
// that ends Grant.Lost when the entry vanishes, the lease pool.

var _ driver.Semaphores = (*Backend)(nil)

// semBase is the internal name every key of semaphore name starts with.
func semBase(name string) string { return semPrefix + name + "\x00" }

// semPrefix starts every semaphore's internal names; permitSuffix ends the
// internal lock key of its permits.
const semPrefix, permitSuffix = "\x00sem\x00", "\x00p"

// permitKey is the internal lock key whose queue holds name's permits.
func permitKey(name string) string { return semPrefix + name + permitSuffix }

// limitKey is the store key of name's number of permits.
func (b *Backend) limitKey(name string) string { return b.prefix + b.esc(semBase(name)) + "limit" }

// AcquirePermit takes a permit of req.Key in one transaction: if the stored
// limit is limit (or none is stored, which stores it), it puts the permit's
// entry and reads the limit oldest entries of the semaphore; the entry
// holds a permit if it is among them. Entries only ever leave the head of
// that order, and a new one joins its tail, so an entry among the limit
// oldest stays among them while it lives, and at most limit entries are
// ever among them. A refused entry is deleted at once, so a single attempt
// leaves nothing behind. The fence is the entry's create revision.
//
// While a refused entry lives (between its put and its deletion), it takes
// a place in the order: an attempt then may be refused although fewer than
// limit permits are held, never the other way round. Its deletion wakes
// nobody (see WatchPermits); a waiter refused so tries again at its next
// poll.
func (b *Backend) AcquirePermit(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	if err := b.ready(ctx); err != nil {
		return driver.Grant{}, err
	}
	if limit < 1 {
		return driver.Grant{}, fmt.Errorf("%w: %d permits: want at least 1", driver.ErrInvalidOption, limit)
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	key, lk, want := permitKey(req.Key), b.limitKey(req.Key), strconv.Itoa(limit)
	dir, val := b.dir(key), encodeValue(req.Token, req.Meta)
	var entry string
	t, resp, err := b.leased(ctx, req.TTL, func(id clientv3.LeaseID) (*clientv3.TxnResponse, error) {
		entry = b.entryKey(key, id)
		put := clientv3.OpPut(entry, val, clientv3.WithLease(id))
		oldest := clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(limit)),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		return b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(lk), "=", want)).
			Then(put, oldest).
			Else(clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)},
				[]clientv3.Op{clientv3.OpPut(lk, want), put, oldest},
				[]clientv3.Op{clientv3.OpGet(lk)})).
			Commit()
	})
	if err != nil {
		return driver.Grant{}, b.fail(err)
	}
	ops := resp.Responses
	if !resp.Succeeded {
		inner := ops[0].GetResponseTxn()
		if !inner.Succeeded {
			b.leases.put(t.id, t.ttl, t.confirmed) // nothing was put on it
			return driver.Grant{}, b.limitDiffers(req.Key, inner.Responses[0].GetResponseRange().Kvs, limit)
		}
		ops = inner.Responses[1:] // the limit was stored with the permit
	}
	for _, kv := range ops[1].GetResponseRange().Kvs {
		if string(kv.Key) == entry {
			return b.granted(req.Token, entry, t, resp.Header.Revision, req.TTL), nil
		}
	}
	rctx, rcancel := b.request(context.WithoutCancel(ctx))
	defer rcancel()
	if _, err := b.cli.Delete(rctx, entry); err != nil {
		// The entry stays until its lease expires, taking a place meanwhile.
		return driver.Grant{}, b.fail(fmt.Errorf("delete refused entry: %w", err))
	}
	b.leases.put(t.id, t.ttl, t.confirmed)
	return driver.Grant{}, fmt.Errorf("%w: %d permits held", driver.ErrNotAcquired, limit)
}

// limitDiffers is the error of an attempt that expected limit permits of
// name, whose stored limit kvs holds.
func (b *Backend) limitDiffers(name string, kvs []*mvccpb.KeyValue, limit int) error {
	stored := "none"
	if len(kvs) > 0 {
		stored = string(kvs[0].Value)
	}
	return fmt.Errorf("%w: the semaphore has %s permits, not %d", driver.ErrInvalidOption, stored, limit)
}

// RenewPermit renews token's permit of name as Renew renews a lock.
func (b *Backend) RenewPermit(ctx context.Context, name, token string, ttl time.Duration) error {
	return b.Renew(ctx, permitKey(name), token, ttl)
}

// ReleasePermit deletes token's permit of name as Release deletes a lock's
// entry; the deletion wakes name's watchers.
func (b *Backend) ReleasePermit(ctx context.Context, name, token string) error {
	return b.Release(ctx, permitKey(name), token)
}

// SetPermits stores n as name's limit, which wakes name's watchers.
func (b *Backend) SetPermits(ctx context.Context, name string, n int) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("%w: %d permits: want at least 1", driver.ErrInvalidOption, n)
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	if _, err := b.cli.Put(ctx, b.limitKey(name), strconv.Itoa(n)); err != nil {
		return b.fail(err)
	}
	return nil
}

// InspectPermits returns name's stored limit and its permit entries, oldest
// first, read at one revision. A refused attempt's entry shows among them
// for the moment it lives.
func (b *Backend) InspectPermits(ctx context.Context, name string) (int, []driver.Info, error) {
	if err := b.ready(ctx); err != nil {
		return 0, nil, err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	resp, err := b.cli.Txn(ctx).Then(
		clientv3.OpGet(b.limitKey(name)),
		clientv3.OpGet(b.dir(permitKey(name)), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
	).Commit()
	if err != nil {
		return 0, nil, b.fail(err)
	}
	limit := 0
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if limit, err = strconv.Atoi(string(kvs[0].Value)); err != nil {
			return 0, nil, fmt.Errorf("etcdlock: stored limit: %w", err)
		}
	}
	held, err := b.infos(ctx, holdersOf(name, resp.Responses[1].GetResponseRange().Kvs))
	return limit, held, err
}

// holdersOf pairs name with each of its entries kvs.
func holdersOf(name string, kvs []*mvccpb.KeyValue) []keyHolder {
	out := make([]keyHolder, len(kvs))
	for i, kv := range kvs {
		out[i] = keyHolder{name, kv}
	}
	return out
}

// WatchPermits fires when a held permit of name is deleted (released,
// expired) or its limit is stored. The deletion of a refused attempt's
// entry is no notice: waiters would otherwise wake each other with their
// own refusals, each refusal making the others' attempts that are refused
// in turn.
func (b *Backend) WatchPermits(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if err := b.ready(ctx); err != nil {
		return nil, nil, err
	}
	lk := b.limitKey(name)
	return b.watchPrefix(ctx, name, b.prefix+b.esc(semBase(name)), func(ctx context.Context, ev *clientv3.Event) bool {
		switch {
		case string(ev.Kv.Key) == lk:
			return true
		case ev.Type != mvccpb.DELETE:
			return false
		}
		return ev.PrevKv == nil || b.heldPermit(ctx, name, ev.PrevKv.CreateRevision)
	}, clientv3.WithPrevKV())
}

// heldPermit reports whether the permit entry of name created at rev was
// granted: whether fewer entries than the limit were older at rev. A
// failed read (a compacted revision, say) counts as granted: a needless
// wake-up costs one attempt, a missed one a poll interval.
func (b *Backend) heldPermit(ctx context.Context, name string, rev int64) bool {
	ctx, cancel := b.request(ctx)
	defer cancel()
	resp, err := b.cli.Txn(ctx).Then(
		clientv3.OpGet(b.limitKey(name), clientv3.WithRev(rev)),
		clientv3.OpGet(b.dir(permitKey(name)), clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithKeysOnly(),
			clientv3.WithMaxCreateRev(rev-1)),
	).Commit()
	if err != nil {
		return true
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return true
	}
	limit, err := strconv.Atoi(string(kvs[0].Value))
	return err != nil || len(resp.Responses[1].GetResponseRange().Kvs) < limit
}

// watchPrefix watches the keys under prefix, which belong to name, with
// opts, and fires wake on every event for which fires holds. It returns once the
// watch is in place, so nothing after the call is missed. A watch that
// breaks is opened again, and wake fires then, since an event may have
// been missed meanwhile. stop must be called once.
func (b *Backend) watchPrefix(ctx context.Context, name, prefix string, fires func(context.Context, *clientv3.Event) bool, opts ...clientv3.OpOption) (<-chan struct{}, func(), error) {
	if err := b.checkOpen(); err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(waitWatchContext(ctx))
	unhook := context.AfterFunc(b.closing, cancel)
	opts = append(opts, clientv3.WithPrefix())
	wch := b.cli.Watch(wctx, prefix, append(opts, clientv3.WithCreatedNotify())...)
	stop := func() { unhook(); cancel() }
	rctx, rcancel := b.request(ctx)
	defer rcancel()
	select {
	case wr, ok := <-wch:
		if !ok || wr.Err() != nil {
			stop()
			return nil, nil, b.fail(fmt.Errorf("watch: %w", errors.Join(wr.Err(), wctx.Err(), errors.New("not created"))))
		}
	case <-rctx.Done():
		stop()
		return nil, nil, b.fail(fmt.Errorf("watch: %w", rctx.Err()))
	}
	wake := make(chan struct{}, 1)
	notify := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			for wr := range wch {
				if wr.Err() != nil {
					break
				}
				if slices.ContainsFunc(wr.Events, func(ev *clientv3.Event) bool { return fires(wctx, ev) }) {
					notify()
				}
			}
			if sleep(wctx, watchRetry) != nil {
				return
			}
			notify() // the broken watch may have missed an event
			wch = b.cli.Watch(wctx, prefix, opts...)
		}
	}()
	return wake, func() { stop(); <-done }, nil
}

// watchRetry is the pause before a broken watch (compaction, a lost
// leader) is opened again.
const watchRetry = 50 * time.Millisecond
