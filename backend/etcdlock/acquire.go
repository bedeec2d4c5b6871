package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

// Acquire takes req.Key only if its queue is empty, in one transaction that
// puts the entry, alone, on the condition that neither the queue's tail key
// (written once a waiter queues) nor any entry exists. etcd compares every
// key of a range, so the directory is compared only when no tail key
// exists; a queue whose tail key exists is refused on one key of its
// directory instead. A tail key left over an empty directory (its entry
// was deleted by hand while its lease lives) is deleted by a second
// transaction, which takes the key. Refused on a queue without waiters, the
// transaction reads the holder's entry: if req.Token holds it (an attempt
// whose reply was lost), the hold is granted again (grantedAgain). With
// waiters queued the holder is not read (finding it would read the whole
// queue): the attempt is refused, as the driver allows.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.ready(ctx); err != nil {
		return driver.Grant{}, err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	dir, tail, val := b.dir(req.Key), b.tailKey(req.Key), encodeValue(req.Token, req.Meta)
	var (
		entry  string
		holder []*mvccpb.KeyValue // the holder's entry, read by an attempt refused on a queue without waiters
	)
	t, resp, err := b.leased(ctx, req.TTL, func(id clientv3.LeaseID) (*clientv3.TxnResponse, error) {
		entry = b.entryKey(req.Key, id)
		take := clientv3.OpPut(entry, val, clientv3.WithLease(id))
		resp, err := b.batch.txn(ctx, dir, len(entry)+len(val),
			[]clientv3.Cmp{noTail(tail)},
			// Without a tail key the directory holds the holder's entry
			// alone: a read of one key finds it.
			[]clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{emptyDir(dir)}, []clientv3.Op{take},
				[]clientv3.Op{clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithLimit(1))})},
			[]clientv3.Op{clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))})
		switch {
		case err != nil:
			return nil, err
		case resp.Succeeded:
			inner := resp.Responses[0].GetResponseTxn()
			if resp.Succeeded = inner.Succeeded; !inner.Succeeded {
				holder = inner.Responses[0].GetResponseRange().Kvs
			}
			return resp, nil
		case len(resp.Responses[0].GetResponseRange().Kvs) > 0:
			return resp, nil
		}
		return b.cli.Txn(ctx).If(emptyDir(dir)).Then(take, clientv3.OpDelete(tail)).Commit()
	})
	if err != nil {
		return driver.Grant{}, b.fail(err)
	}
	if resp.Succeeded {
		return b.granted(req.Token, entry, t, resp.Header.Revision, req.TTL), nil
	}
	b.leases.put(t.id, t.ttl, t.confirmed)
	if len(holder) > 0 && ofToken(holder[0].Value, req.Token) {
		return b.grantedAgain(ctx, req.Key, req, holder[0])
	}
	return driver.Grant{}, driver.ErrNotAcquired
}

// grantedAgain grants req again on kv, the entry under key of an earlier
// attempt of req.Token that holds: its reply was lost (a lock service's
// call cut short), so nothing here knew of the hold. It renews kv's lease
// and records the hold, with kv's fence; a lease of another time to live
// than req.TTL's is then moved, as Renew moves it.
func (b *Backend) grantedAgain(ctx context.Context, key string, req driver.AcquireRequest, kv *mvccpb.KeyValue) (driver.Grant, error) {
	b.mu.Lock()
	h := b.holdingOf(key, req.Token)
	b.mu.Unlock()
	if h != nil && h.entry == string(kv.Key) { // this backend granted it: renew its record
		if err := b.renewAgain(ctx, key, req); err != nil {
			return driver.Grant{}, err
		}
		return driver.Grant{Fence: uint64(h.rev), Lost: h.lost, Requested: h.requested}, nil
	}
	id, sent := clientv3.LeaseID(kv.Lease), time.Now()
	sec, err := b.leases.renew.keepAlive(ctx, id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return driver.Grant{}, fmt.Errorf("%w: the earlier attempt's hold ran out", driver.ErrNotAcquired)
	case err != nil:
		return driver.Grant{}, b.fail(fmt.Errorf("renew the earlier attempt's lease: %w", err))
	}
	g := b.granted(req.Token, string(kv.Key), &ticket{id: id, ttl: sec, confirmed: sent}, kv.CreateRevision, req.TTL)
	if sec != ttlSeconds(req.TTL) {
		if err := b.renewAgain(ctx, key, req); err != nil {
			return driver.Grant{}, err
		}
	}
	return g, nil
}

// renewAgain renews a hold granted again for req.TTL; a hold that ended
// meanwhile refuses the attempt, as an acquisition says it.
func (b *Backend) renewAgain(ctx context.Context, key string, req driver.AcquireRequest) error {
	err := b.Renew(ctx, key, req.Token, req.TTL)
	if errors.Is(err, driver.ErrNotHeld) {
		return fmt.Errorf("%w: the earlier attempt's hold ended (%v)", driver.ErrNotAcquired, err)
	}
	return err
}

// noTail is true while no waiter has queued for the key whose tail key is
// tail (or all that did are gone).
func noTail(tail string) clientv3.Cmp { return clientv3.Compare(clientv3.CreateRevision(tail), "=", 0) }

// emptyDir is true while the directory holds no entry. etcd compares every
// key of the range: it is for a directory known to be short.
func emptyDir(dir string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(dir), "=", 0).WithPrefix()
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
// its own is gone and its own is still there. While it waits it watches only
// the entry just before its own and keeps its lease alive. If its entry
// vanishes (the lease expired or was revoked, an operator deleted it), it
// queues again at the tail with a new lease. If ctx ends it revokes its
// lease, which deletes its entry, and returns an error matching
// driver.ErrNotAcquired; if the backend is closed meanwhile, one matching
// driver.ErrClosed.
func (b *Backend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.ready(ctx); err != nil {
		return driver.Grant{}, err
	}
	if err := b.enterWait(req.Key); err != nil {
		return driver.Grant{}, err
	}
	defer b.waits.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(b.closing, cancel)()
	val := encodeValue(req.Token, req.Meta)
	for pause := time.Duration(0); ; pause = min(max(2*pause, 10*time.Millisecond), time.Second) {
		err := sleep(ctx, pause)
		if err == nil {
			w := &waiter{b: b, key: req.Key, dir: b.dir(req.Key)}
			var g driver.Grant
			if g, err = w.acquire(ctx, req, val); err == nil {
				return g, nil
			}
			if w.t != nil {
				w.abandon()
			}
		}
		if !errors.Is(err, errQueueEntryGone) || ctx.Err() != nil {
			return driver.Grant{}, b.waitFailed(ctx, req.Key, err)
		}
	}
}

// enterWait counts a wait in progress, unless the backend is closed.
func (b *Backend) enterWait(key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkOpen(); err != nil {
		return err
	}
	b.waits.Add(1)
	return nil
}

// waitFailed is the error of a wait that ended with err.
func (b *Backend) waitFailed(ctx context.Context, key string, err error) error {
	switch {
	case b.closing.Err() != nil:
		return driver.ErrClosed
	case driver.Ended(ctx):
		return errors.Join(driver.ErrNotAcquired, ctx.Err())
	}
	return b.fail(err)
}

// acquire queues once and waits until the entry is first. Before granting, it
// hands the holder (nearly) its full lease, not what is left of it.
func (w *waiter) acquire(ctx context.Context, req driver.AcquireRequest, val string) (driver.Grant, error) {
	ttl := req.TTL
	var err error
	w.t, w.pos, err = w.enqueue(ctx, val, ttl)
	if err == nil {
		err = w.wait(ctx)
	}
	if err == nil && time.Until(w.t.expiry()) < ttl-ttl/8 {
		err = w.keepAlive(ctx) // a failure that leaves the lease valid grants on its last confirmation
	}
	if err != nil {
		return driver.Grant{}, err
	}
	return w.b.granted(req.Token, w.entry, w.t, w.myRev, ttl), nil
}

// holdID names an acquisition this backend made: its queue's directory and
// its token. A token names one acquisition, but a caller may take two keys
// under one, which must not hide each other.
type holdID struct{ dir, token string }

// holding is an acquisition this backend made and has not released.
type holding struct {
	entry string
	rev   int64              // the entry's create revision: the fence, and what names the entry in compares
	lost  context.Context    // done when the store dropped the hold
	lose  context.CancelFunc // ends lost

	requested context.Context         // done when a release was requested (request.go)
	ask       context.CancelCauseFunc // ends requested

	cancel context.CancelFunc // ends the loss watch once it runs
	watch  *time.Timer        // starts the loss watch

	renewing sync.Mutex // one Renew at a time, so that none races a move (see Backend.move)

	// The lease the entry is on. A Renew with another TTL moves the entry to
	// another lease; the entry keeps its name, after the first lease.
	// Guarded by Backend.mu.
	lease     clientv3.LeaseID
	ttl       int64 // seconds
	confirmed time.Time
	// stray are leases that a move whose outcome is unknown may have put the
	// entry on; the next Renew settles them (Backend.move). Guarded by
	// Backend.mu.
	stray []clientv3.LeaseID
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
func (b *Backend) granted(token, entry string, t *ticket, rev int64, ttl time.Duration) driver.Grant {
	ctx, cancel := context.WithCancel(holdWatchContext)
	h := &holding{entry: entry, rev: rev, lease: t.id, ttl: t.ttl, cancel: cancel, confirmed: t.confirmed}
	h.lost, h.lose = context.WithCancel(context.Background())
	h.requested, h.ask = context.WithCancelCause(context.Background())
	g := driver.Grant{Fence: uint64(rev), Lost: h.lost, Requested: h.requested, Sent: t.sent(ttl)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		cancel()
		h.lose()
		return g
	}
	id := holdID{dir: entryDir(entry), token: token}
	if old := b.held[id]; old != nil {
		old.stop(b) // a record this grant replaces: its watch must not outlive it
	}
	b.held[id] = h
	b.followRequestsLocked()
	b.claimRequestLocked(h, token)
	b.bg.Add(1)
	h.watch = time.AfterFunc(lossWatchDelay, func() {
		defer b.bg.Done()
		if ctx.Err() == nil && b.watchDeleted(ctx, entry, rev) {
			b.mu.Lock()
			if b.held[id] == h {
				delete(b.held, id) // the client sends no release for a lock the store dropped
			}
			b.mu.Unlock()
			h.lose()
		}
	})
	return g
}

// forget drops token's record of key and stops its watch; it returns nil if
// this backend did not make that acquisition.
func (b *Backend) forget(key, token string) *holding {
	b.mu.Lock()
	h := b.holdingOf(key, token)
	if h != nil {
		delete(b.held, holdID{dir: b.dir(key), token: token})
	}
	b.mu.Unlock()
	if h != nil {
		h.stop(b)
	}
	return h
}

// holdingOf returns this backend's acquisition of key by token, or nil.
// b.mu must be held.
func (b *Backend) holdingOf(key, token string) *holding {
	return b.held[holdID{dir: b.dir(key), token: token}]
}
