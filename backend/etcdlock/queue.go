package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
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

// position is what the waiter knew of the queue ahead of it at revision rev:
// every entry created between pred and its own was gone, and pred, created
// at predRev, had not been deleted before rev.
type position struct {
	pred    string // the entry just before ours; "" when ours is first
	predRev int64  // pred's create revision
	rev     int64
}

// enqueue puts the entry in the key's queue. If the queue is empty (no
// tail key, and nothing in the directory) that is all: a holder alone
// writes one key, as etcd's own lock service does. Otherwise, in the same
// transaction, it swaps the queue's tail key to the entry, which returns
// the entry created just before it. With WithLinkedQueue the old tail is
// the entry ahead, and nothing else is read; with no tail (the holder took
// the free key, or the tail's lease ended before its entry) it reads three
// keys of the directory: one entry besides its own is ahead, and with
// more, the entry ahead is found by reading the whole queue (locate).
// Without, it reads the two newest entries by create revision,
// its own and the one ahead, which etcd serves by reading the whole queue.
// The transaction goes in a batch with other calls' (batcher), as a free
// key's Acquire does.
func (w *waiter) enqueue(ctx context.Context, val string, ttl time.Duration) (*ticket, position, error) {
	rctx, cancel := w.b.request(ctx)
	defer cancel()
	tail := w.b.tailKey(w.key)
	read := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(3)}
	if !w.b.linked() {
		read = []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(2),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)}
	}
	t, resp, err := w.b.leased(rctx, ttl, func(id clientv3.LeaseID) (*clientv3.TxnResponse, error) {
		w.entry = w.b.entryKey(w.key, id)
		// etcd decides a transaction's branches before it applies any op,
		// so the compares see the queue without the entry, while the reads
		// after the put see it. The value is sent once: only the tail's ops,
		// which are short, appear in two branches.
		queue := []clientv3.Op{clientv3.OpGet(tail), clientv3.OpPut(tail, w.entry, clientv3.WithLease(id)), clientv3.OpGet(w.dir, read...)}
		behindTail := queue
		if w.b.linked() {
			// The old tail names the entry ahead: no read of the directory,
			// which walks the names of every entry deleted since the last
			// compaction before it finds a live one.
			behindTail = queue[:2]
		}
		return w.b.batch.txn(rctx, w.dir, len(w.entry)+len(val), nil, []clientv3.Op{
			clientv3.OpPut(w.entry, val, clientv3.WithLease(id), clientv3.WithPrevKV()),
			clientv3.OpTxn([]clientv3.Cmp{noTail(tail)},
				[]clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{emptyDir(w.dir)}, nil, queue)},
				behindTail),
		}, nil)
	})
	if err != nil {
		return t, position{}, err
	}
	w.t, w.myRev = t, resp.Header.Revision
	if resp.Responses[0].GetResponsePut().PrevKv != nil {
		return t, position{}, errEntryReused // the put found the entry there already
	}
	ops := resp.Responses[1].GetResponseTxn()
	tailed := !ops.Succeeded
	if !tailed {
		if ops = ops.Responses[0].GetResponseTxn(); ops.Succeeded {
			return t, position{rev: w.myRev}, nil // the queue was empty
		}
	}
	if tailed && w.b.linked() {
		if prev := ops.Responses[0].GetResponseRange().Kvs; len(prev) == 1 {
			// The tail key was written with the entry it names. If that
			// entry is gone, check finds whether this one is first.
			return t, position{pred: string(prev[0].Value), predRev: prev[0].ModRevision, rev: prev[0].ModRevision}, nil
		}
		// The tail was there when etcd chose the branch and gone when it
		// was read, which one call per key in a batch rules out: read the
		// whole queue rather than trust either.
		pos, err := w.relocate(ctx, w.myRev, true)
		return t, pos, err
	}
	in := ops.Responses[2].GetResponseRange().Kvs
	switch {
	case len(in) == 1:
		return t, position{rev: w.myRev}, nil // ours is the only entry
	case !w.b.linked():
		// The newest two: ours, and the one ahead.
		return t, position{pred: string(in[1].Key), predRev: in[1].CreateRevision, rev: w.myRev}, nil
	}
	if prev := ops.Responses[0].GetResponseRange().Kvs; len(prev) == 1 {
		// The tail key was written with the entry it names.
		return t, position{pred: string(prev[0].Value), predRev: prev[0].ModRevision, rev: prev[0].ModRevision}, nil
	}
	if len(in) == 2 { // no tail, and one entry besides ours: it is ahead
		ahead := in[0]
		if string(ahead.Key) == w.entry {
			ahead = in[1]
		}
		return t, position{pred: string(ahead.Key), predRev: ahead.CreateRevision, rev: w.myRev}, nil
	}
	pos, err := w.relocate(ctx, w.myRev, true)
	return t, pos, err
}

// check learns, with one read of three keys at revision rev, whether the
// entry ahead is still there, and if it is gone, whether the waiter's entry
// is now first: it is when the entry ahead was released as the holder (the
// queue's released key holds its create revision), since every entry before
// a holder was gone when it was granted. Otherwise, the entry ahead having
// given up or expired, it reads the whole queue (locate), as it always does
// without WithLinkedQueue.
//
// Given a revision at or after the entry's own, it reads at that revision
// from the member's own state (a serializable read), which a member that
// has applied it can answer; otherwise it reads linearizably.
func (w *waiter) check(ctx context.Context, rev int64) (position, error) {
	if !w.b.linked() {
		return w.locate(ctx, rev)
	}
	read := w.readAt(rev)
	rctx, cancel := w.b.request(ctx)
	defer cancel()
	resp, err := w.b.cli.Txn(rctx).Then(
		clientv3.OpGet(w.pos.pred, append(read, clientv3.WithKeysOnly())...),
		clientv3.OpGet(w.entry, append(read, clientv3.WithKeysOnly())...),
		clientv3.OpGet(w.b.releasedKey(w.key), read...),
	).Commit()
	if err != nil {
		if read != nil {
			return w.check(ctx, 0) // not applied there yet, or compacted
		}
		return position{}, err
	}
	if err := w.own(resp.Responses[1]); err != nil {
		return position{}, err
	}
	if read == nil {
		rev = resp.Header.Revision // the header tells the member's revision, not the one read at
	}
	if pred := resp.Responses[0].GetResponseRange().Kvs; len(pred) == 1 && pred[0].CreateRevision == w.pos.predRev {
		return position{pred: w.pos.pred, predRev: w.pos.predRev, rev: rev}, nil
	}
	if rel := resp.Responses[2].GetResponseRange().Kvs; len(rel) == 1 && string(rel[0].Value) == strconv.FormatInt(w.pos.predRev, 10) {
		return position{rev: rev}, nil
	}
	return w.locate(ctx, rev)
}

// locate reads the whole queue for the entry just ahead of the waiter's own
// and checks that its own is still there: etcd has no cheaper "newest entry
// older than mine" query, since a range sorted by create revision reads the
// whole directory. At a revision at or after the entry's own it reads as
// check does: the queue ahead can only shrink, so what was ahead at rev is an
// upper bound.
func (w *waiter) locate(ctx context.Context, rev int64) (position, error) {
	read := w.readAt(rev)
	rctx, cancel := w.b.request(ctx)
	defer cancel()
	resp, err := w.b.cli.Txn(rctx).Then(
		clientv3.OpGet(w.dir, append(read, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1),
			clientv3.WithMaxCreateRev(w.myRev-1), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))...),
		clientv3.OpGet(w.entry, append(read, clientv3.WithKeysOnly())...),
	).Commit()
	if err != nil {
		if read != nil {
			return w.locate(ctx, 0)
		}
		return position{}, err
	}
	if err := w.own(resp.Responses[1]); err != nil {
		return position{}, err
	}
	pos := position{rev: resp.Header.Revision}
	if read != nil {
		pos.rev = rev
	}
	if before := resp.Responses[0].GetResponseRange().Kvs; len(before) > 0 {
		pos.pred, pos.predRev = string(before[0].Key), before[0].CreateRevision
	}
	return pos, nil
}

// readAt returns the options of a read at rev from a member's own state, or
// none (a linearizable read of the latest revision) if rev is before the
// waiter's entry, which a member would not know yet.
func (w *waiter) readAt(rev int64) []clientv3.OpOption {
	if rev < w.myRev {
		return nil
	}
	return []clientv3.OpOption{clientv3.WithRev(rev), clientv3.WithSerializable()}
}

// own checks the read of the waiter's own entry.
func (w *waiter) own(r *etcdserverpb.ResponseOp) error {
	switch own := r.GetResponseRange().Kvs; {
	case len(own) == 0:
		return errQueueEntryGone
	case own[0].CreateRevision != w.myRev:
		return errEntryReused
	}
	return nil
}

var (
	errQueueEntryGone = errors.New("queue entry gone")
	errEntryReused    = errors.New("the lease's entry was already queued")
)

// relocate is check, or locate if whole, retried while a store failure (a
// leader election, say) lasts, the lease is not in doubt, and ctx allows.
func (w *waiter) relocate(ctx context.Context, rev int64, whole bool) (position, error) {
	find := w.check
	if whole {
		find = w.locate
	}
	pos, err := find(ctx, rev)
	for err != nil && !errors.Is(err, errQueueEntryGone) && !errors.Is(err, errEntryReused) && ctx.Err() == nil && !w.expired() {
		if err = sleep(ctx, 100*time.Millisecond); err == nil {
			pos, err = find(ctx, 0)
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
				return w.relocate(ctx, 0, false)
			case wr.Created:
				if wr.Header.Revision <= w.pos.rev {
					continue // a member behind pos.rev replays everything after it
				}
				pos, err := w.relocate(ctx, wr.Header.Revision, false)
				if err != nil || pos.pred != w.pos.pred {
					return pos, err
				}
				w.pos = pos // still waiting on pred
			}
			if rev := deleted(wr, w.pos.rev); rev != 0 {
				return w.relocate(ctx, rev, false)
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
