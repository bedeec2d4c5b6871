package etcdlock

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

var _ driver.MultiAcquirer = (*Backend)(nil)

// AcquireAll takes every key of reqs in one transaction, each entry on a
// lease of its own as Acquire puts it, on the condition that every key's
// queue is empty; else it takes none and reads each queue's first key, to
// name the first key held. A key whose queue is empty but for a tail key
// left over (Acquire says how) is named too: the client's wait for it
// clears the tail. The transaction compares and reads two keys per key of
// the set, within etcd's default of 128 operations for MaxAcquireAll keys.
func (b *Backend) AcquireAll(ctx context.Context, reqs []driver.AcquireRequest) ([]driver.Grant, error) {
	if err := driver.ValidateAcquireAll(reqs); err != nil {
		return nil, err
	}
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	for fresh := false; ; fresh = true {
		tickets, err := b.ticketsFor(ctx, reqs, fresh)
		if err != nil {
			return nil, b.fail(fmt.Errorf("lease: %w", err))
		}
		entries, resp, err := b.takeAll(ctx, reqs, tickets)
		reused := false
		for _, t := range tickets {
			reused = reused || t.reused
			_ = t.settle() // a failed refresh leaves confirmed at the lease's last confirmation
		}
		switch {
		case err != nil && reused && !fresh && errors.Is(err, rpctypes.ErrLeaseNotFound):
			continue // a reused lease was gone: again with new ones
		case err != nil:
			return nil, b.fail(err)
		case resp.Succeeded:
			grants := make([]driver.Grant, len(reqs))
			for i, req := range reqs {
				grants[i] = b.granted(req.Token, entries[i], tickets[i], resp.Header.Revision, req.TTL)
			}
			return grants, nil
		}
		for _, t := range tickets {
			b.leases.put(t.id, t.ttl, t.confirmed)
		}
		for i, r := range resp.Responses {
			if len(r.GetResponseRange().Kvs) > 0 {
				return nil, &driver.HeldError{Key: reqs[i/2].Key}
			}
		}
		return nil, fmt.Errorf("etcdlock: acquire all: refused, yet no key of the set has a queue")
	}
}

// AcquiresTogether reports true: one transaction takes any keys.
func (b *Backend) AcquiresTogether([]string) bool { return true }

// ticketsFor takes a lease for each of reqs, new ones if fresh.
func (b *Backend) ticketsFor(ctx context.Context, reqs []driver.AcquireRequest, fresh bool) ([]*ticket, error) {
	tickets := make([]*ticket, 0, len(reqs))
	for _, req := range reqs {
		t, err := b.leases.take(ctx, req.TTL, fresh)
		if err != nil {
			for _, t := range tickets {
				_ = t.settle()
				b.leases.put(t.id, t.ttl, t.confirmed)
			}
			return nil, err
		}
		tickets = append(tickets, t)
	}
	return tickets, nil
}

// takeAll runs the transaction that puts each of reqs' entries on its
// ticket's lease if every queue is empty, and otherwise reads each queue's
// first entry and its tail key, in turn. It returns the entries' names.
func (b *Backend) takeAll(ctx context.Context, reqs []driver.AcquireRequest, tickets []*ticket) ([]string, *clientv3.TxnResponse, error) {
	entries := make([]string, len(reqs))
	cmps := make([]clientv3.Cmp, 0, 2*len(reqs))
	puts := make([]clientv3.Op, len(reqs))
	reads := make([]clientv3.Op, 0, 2*len(reqs))
	for i, req := range reqs {
		dir, tail := b.dir(req.Key), b.tailKey(req.Key)
		entries[i] = b.entryKey(req.Key, tickets[i].id)
		cmps = append(cmps, noTail(tail), emptyDir(dir))
		puts[i] = clientv3.OpPut(entries[i], encodeValue(req.Token, req.Meta), clientv3.WithLease(tickets[i].id))
		reads = append(reads,
			clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1)),
			clientv3.OpGet(tail, clientv3.WithKeysOnly()))
	}
	resp, err := b.cli.Txn(ctx).If(cmps...).Then(puts...).Else(reads...).Commit()
	return entries, resp, err
}
