package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// waiter is one queued acquisition.
type waiter struct {
	b                *Backend
	key, dir, entry  string
	t                *ticket
	myRev            int64 // create revision of entry: the fence once granted
	pos              position
	keepAliveRetries int
}

// position is what the waiter knew of the queue ahead of it at revision rev.
type position struct {
	pred string // the entry just before ours; "" when ours is first
	rev  int64
}

// enqueue puts the entry at the tail of the queue and, in the same
// transaction, reads the two newest entries of the queue: its own and the
// one just ahead of it, if any. A contended Lock thus costs one request and
// one read of the queue, like an uncontended one; etcd has no cheaper
// "newest entry older than mine" query, since a range sorted by create
// revision reads the whole directory.
func (w *waiter) enqueue(ctx context.Context, val string, ttl time.Duration) (*ticket, position, error) {
	rctx, cancel := w.b.request(ctx)
	defer cancel()
	t, resp, err := w.b.leased(rctx, ttl, func(id clientv3.LeaseID) (*clientv3.TxnResponse, error) {
		w.entry = w.b.entryKey(w.key, id)
		return w.b.cli.Txn(rctx).Then(
			clientv3.OpPut(w.entry, val, clientv3.WithLease(id)),
			clientv3.OpGet(w.dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(2),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)),
		).Commit()
	})
	if err != nil {
		return t, position{}, err
	}
	w.myRev = resp.Header.Revision
	newest := resp.Responses[1].GetResponseRange().Kvs
	if len(newest) == 0 || string(newest[0].Key) != w.entry || newest[0].CreateRevision != w.myRev {
		return t, position{}, errEntryReused // the put found the entry there already
	}
	pos := position{rev: w.myRev}
	if len(newest) > 1 {
		pos.pred = string(newest[1].Key)
	}
	return t, pos, nil
}

// locate reads the entry just ahead of the waiter's own and checks that its
// own is still there. Given a revision at or after the entry's own, it first tries
// a serializable read at that revision, which a member that has applied it
// answers from its own state: the queue ahead can only shrink, so what was
// ahead at rev is an upper bound. Otherwise it reads linearizably.
func (w *waiter) locate(ctx context.Context, rev int64) (position, error) {
	var read []clientv3.OpOption
	if rev >= w.myRev { // before myRev, a member would not know our own entry yet
		read = []clientv3.OpOption{clientv3.WithRev(rev), clientv3.WithSerializable()}
	}
	rctx, cancel := w.b.request(ctx)
	defer cancel()
	resp, err := w.b.cli.Txn(rctx).Then(
		clientv3.OpGet(w.dir, append(read, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1),
			clientv3.WithMaxCreateRev(w.myRev-1), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))...),
		clientv3.OpGet(w.entry, append(read, clientv3.WithKeysOnly())...),
	).Commit()
	if err != nil {
		if read != nil {
			return w.locate(ctx, 0) // not applied there yet, or compacted
		}
		return position{}, err
	}
	switch own := resp.Responses[1].GetResponseRange().Kvs; {
	case len(own) == 0:
		return position{}, errQueueEntryGone
	case own[0].CreateRevision != w.myRev:
		return position{}, errEntryReused
	}
	pos := position{rev: resp.Header.Revision}
	if read != nil {
		pos.rev = rev // the header tells the member's revision, not the one read at
	}
	if before := resp.Responses[0].GetResponseRange().Kvs; len(before) > 0 {
		pos.pred = string(before[0].Key)
	}
	return pos, nil
}

var (
	errQueueEntryGone = errors.New("queue entry gone")
	errEntryReused    = errors.New("the lease's entry was already queued")
)

// relocate is locate, retried while a store failure (a leader election, say)
// lasts, the lease is not in doubt, and ctx allows.
func (w *waiter) relocate(ctx context.Context, rev int64) (position, error) {
	pos, err := w.locate(ctx, rev)
	for err != nil && !errors.Is(err, errQueueEntryGone) && !errors.Is(err, errEntryReused) && ctx.Err() == nil && !w.expired() {
		if err = sleep(ctx, 100*time.Millisecond); err == nil {
			pos, err = w.locate(ctx, 0)
		}
	}
	return pos, err
}

// wait returns once the entry is first in the queue.
func (w *waiter) wait(ctx context.Context) error {
	keep := time.NewTimer(w.keepAliveIn())
	defer keep.Stop()
	for w.pos.pred != "" {
		pos, err := w.next(ctx, keep)
		if err != nil {
			return err
		}
		w.pos = pos
	}
	return nil
}

// next watches the predecessor until it is deleted and returns the new
// position, keeping the lease alive meanwhile. Even when the predecessor was
// the holder, the new position comes from a read that also checks that the
// waiter's own entry is still there: a waiter must not take a lock on an
// entry that vanished, since the waiter behind it may already have.
func (w *waiter) next(ctx context.Context, keep *time.Timer) (position, error) {
	wctx, cancel := context.WithCancel(waitWatchContext(ctx))
	defer cancel()
	// A watch from the current revision joins the server's synced watchers at
	// once; one from an older revision waits for a catch-up pass that runs
	// every 100ms. So watch from now, and close the gap since pos.rev with
	// one read at the watch's start revision if the store moved meanwhile.
	wch := w.b.cli.Watch(wctx, w.pos.pred, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	for {
		select {
		case <-ctx.Done():
			return position{}, ctx.Err()
		case <-keep.C:
			if err := w.keepAlive(ctx); err != nil {
				return position{}, err
			}
			keep.Reset(w.keepAliveIn())
		case wr, ok := <-wch:
			switch {
			case !ok || wr.Err() != nil:
				if err := sleep(ctx, 50*time.Millisecond); err != nil {
					return position{}, err
				}
				return w.relocate(ctx, 0)
			case wr.Created:
				if wr.Header.Revision <= w.pos.rev {
					continue // a member behind pos.rev replays everything after it
				}
				pos, err := w.relocate(ctx, wr.Header.Revision)
				if err != nil || pos.pred != w.pos.pred {
					return pos, err
				}
				w.pos = pos // still waiting on pred
			}
			if rev := deleted(wr, w.pos.rev); rev != 0 {
				return w.relocate(ctx, rev)
			}
		}
	}
}

// deleted returns the revision of the first delete in wr after rev, or 0; a
// member behind rev replays older entries of the same name.
func deleted(wr clientv3.WatchResponse, rev int64) int64 {
	for _, ev := range wr.Events {
		if ev.Type == mvccpb.DELETE && ev.Kv.ModRevision > rev {
			return ev.Kv.ModRevision
		}
	}
	return 0
}

// keepAlive renews the waiter's lease; failures are retried on the next
// tick while the lease lasts. A lease that is gone, or may be, is an error
// matching errQueueEntryGone.
func (w *waiter) keepAlive(ctx context.Context) error {
	kctx, cancel := context.WithTimeout(ctx, min(w.b.requestTimeout, time.Duration(w.t.ttl)*time.Second/3))
	defer cancel()
	err := w.b.leases.keepAlive(kctx, w.t)
	switch {
	case err == nil:
		w.keepAliveRetries = 0
		return nil
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("%w: %w", errQueueEntryGone, err)
	case w.expired():
		return fmt.Errorf("%w: lease unconfirmed past its TTL: %w", errQueueEntryGone, err)
	case ctx.Err() != nil:
		return ctx.Err()
	}
	w.keepAliveRetries++
	return nil
}

// keepAliveIn is when the lease is next renewed: every third of its TTL, and
// sooner after a failure.
func (w *waiter) keepAliveIn() time.Duration {
	d := time.Duration(w.t.ttl) * time.Second / 3
	return d >> min(w.keepAliveRetries, 3)
}

// expired reports whether the store may have dropped the lease.
func (w *waiter) expired() bool {
	return time.Since(w.t.confirmed) >= time.Duration(w.t.ttl)*time.Second
}

// abandon revokes the waiter's lease, which deletes its entry, with a
// context of its own since the caller's has usually ended.
func (w *waiter) abandon() {
	ctx, cancel := w.b.request(context.Background())
	defer cancel()
	_, _ = w.b.cli.Revoke(ctx, w.t.id)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
