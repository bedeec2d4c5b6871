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
	pred        string // the entry just before ours; "" when ours is first
	predIsFirst bool   // pred was the holder: once it goes, ours is first
	rev         int64
}

// enqueue puts the entry at the tail of the queue, in one transaction that
// also reads the entry before it and the holder.
func (w *waiter) enqueue(ctx context.Context, val string, ttl time.Duration) (*ticket, position, error) {
	t, resp, err := w.b.leased(ctx, ttl, func(id clientv3.LeaseID) (*clientv3.TxnResponse, error) {
		return w.b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(w.entry), "=", 0)).
			Then(clientv3.OpPut(w.entry, val, clientv3.WithLease(id)),
				clientv3.OpGet(w.dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(2),
					clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)),
				clientv3.OpGet(w.dir, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...)).
			Commit()
	})
	if err != nil {
		return t, position{}, err
	}
	if !resp.Succeeded {
		return t, position{}, errors.New("token already queued")
	}
	w.myRev = resp.Header.Revision
	pos := position{rev: w.myRev}
	if last := resp.Responses[1].GetResponseRange().Kvs; len(last) == 2 {
		first := resp.Responses[2].GetResponseRange().Kvs
		pos.pred = string(last[1].Key)
		pos.predIsFirst = len(first) == 1 && string(first[0].Key) == pos.pred
	}
	return t, pos, nil
}

// locate reads the queue ahead of the entry and checks that the entry is
// still there.
func (w *waiter) locate(ctx context.Context) (position, error) {
	resp, err := w.b.cli.Txn(ctx).Then(
		clientv3.OpGet(w.dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1),
			clientv3.WithMaxCreateRev(w.myRev-1), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)),
		clientv3.OpGet(w.dir, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...),
		clientv3.OpGet(w.entry, clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return position{}, err
	}
	if resp.Responses[2].GetResponseRange().Count == 0 {
		return position{}, errors.New("queue entry gone: its lease expired")
	}
	pos := position{rev: resp.Header.Revision}
	if before := resp.Responses[0].GetResponseRange().Kvs; len(before) == 1 {
		first := resp.Responses[1].GetResponseRange().Kvs
		pos.pred = string(before[0].Key)
		pos.predIsFirst = len(first) == 1 && string(first[0].Key) == pos.pred
	}
	return pos, nil
}

// wait returns once the entry is first in the queue.
func (w *waiter) wait(ctx context.Context) error {
	keep := time.NewTimer(w.keepAliveIn())
	defer keep.Stop()
	for w.pos.pred != "" {
		deleted, err := w.watchPred(ctx, keep)
		switch {
		case err != nil:
			return err
		case deleted && w.pos.predIsFirst:
			return nil // nothing was ahead of pred, and nothing can be created ahead of us
		}
		pos, err := w.locate(ctx)
		for err != nil && ctx.Err() == nil && !w.expired() {
			// A store failure (a leader election, say): look again while the lease lasts.
			if err = sleep(ctx, 100*time.Millisecond); err == nil {
				pos, err = w.locate(ctx)
			}
		}
		if err != nil {
			return err
		}
		w.pos = pos
	}
	return nil
}

// watchPred watches the predecessor until it is deleted (true), may have
// changed (false: the watch broke, so look again), or ctx ends. It keeps
// the lease alive meanwhile.
func (w *waiter) watchPred(ctx context.Context, keep *time.Timer) (bool, error) {
	wctx, cancel := context.WithCancel(waitWatchContext(ctx))
	defer cancel()
	// A watch from the current revision joins the server's synced watchers at
	// once; one from an older revision waits up to 100ms for a catch-up pass.
	// So watch from now, and close the gap since pos.rev with one read if the
	// store moved meanwhile.
	wch := w.b.cli.Watch(wctx, w.pos.pred, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-keep.C:
			if err := w.keepAlive(ctx); err != nil {
				return false, err
			}
			keep.Reset(w.keepAliveIn())
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return false, sleep(ctx, 50*time.Millisecond)
			}
			if wr.Created {
				if wr.Header.Revision == w.pos.rev {
					continue
				}
				resp, err := w.b.cli.Get(ctx, w.pos.pred, clientv3.WithCountOnly())
				if err != nil {
					return false, nil
				}
				if resp.Count == 0 {
					return true, nil
				}
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return true, nil
				}
			}
		}
	}
}

// keepAlive renews the waiter's lease; failures are retried on the next
// tick while the lease lasts.
func (w *waiter) keepAlive(ctx context.Context) error {
	kctx, cancel := context.WithTimeout(ctx, time.Duration(w.t.ttl)*time.Second/3)
	defer cancel()
	err := w.b.leases.keepAlive(kctx, w.t)
	switch {
	case err == nil:
		w.keepAliveRetries = 0
		return nil
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("queue entry gone: %w", err)
	case w.expired():
		return fmt.Errorf("lease unconfirmed past its TTL: %w", err)
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
