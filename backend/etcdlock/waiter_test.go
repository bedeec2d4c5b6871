package etcdlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// result is what a waiter's Lock returned.
type result struct {
	l   *distlock.Lock
	err error
}

// waitFor starts c.Lock(key) in a goroutine and returns its result channel.
func waitFor(ctx context.Context, c *distlock.Client, key string, opts ...distlock.Option) <-chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := c.Lock(ctx, key, opts...)
		ch <- result{l, err}
	}()
	return ch
}

// queuedBehind polls key's queue until it holds two entries, the second not
// in skip, and returns that second entry. It fails if the waiter returns
// first or nothing changes within 10s.
func queuedBehind(t *testing.T, cli *clientv3.Client, prefix, key string, waiter <-chan result, skip ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if q := entries(t, cli, prefix, key); len(q) == 2 && !slices.Contains(skip, q[1]) {
			return q[1]
		}
		select {
		case r := <-waiter:
			t.Fatalf("waiter returned before queueing: %v", r.err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter queued behind the holder within 10s: %q", entries(t, cli, prefix, key))
		}
	}
}

// granted waits up to 10s for the waiter and fails unless it got the lock.
func granted(t *testing.T, waiter <-chan result) *distlock.Lock {
	t.Helper()
	select {
	case r := <-waiter:
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		return r.l
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not granted within 10s of the release")
		return nil
	}
}

// soleHolder checks that l holds key alone: its entry is the only one in the
// store, and another client's TryLock is refused.
func soleHolder(t *testing.T, ctx context.Context, cli *clientv3.Client, other *distlock.Client, prefix string, l *distlock.Lock) {
	t.Helper()
	if err := l.Err(); err != nil {
		t.Fatalf("granted lock already lost: %v", err)
	}
	if q := entries(t, cli, prefix, l.Key()); len(q) != 1 {
		t.Fatalf("queue while the waiter holds: %q, want exactly its own entry", q)
	}
	if l2, err := other.TryLock(ctx, l.Key()); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			_ = l2.Release(ctx)
		}
		t.Fatalf("another client's TryLock while the waiter holds: %v, want ErrNotAcquired", err)
	}
}

// leaseOf returns the lease an entry is attached to.
func leaseOf(t *testing.T, cli *clientv3.Client, entry string) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(context.Background(), entry)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read %q: %v %v", entry, resp, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// waiterSetup is a held key with a waiter queued behind it.
type waiterSetup struct {
	ctx     context.Context
	cli     *clientv3.Client
	prefix  string
	key     string
	holder  *distlock.Lock
	other   *distlock.Client
	waiter  <-chan result
	entry   string // the waiter's queue entry
	started time.Time
}

// setupWaiter starts a server and three clients: the first holds a fresh
// key, the second waits for it with opts, the third is other.
func setupWaiter(t *testing.T, opts ...distlock.Option) *waiterSetup {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	s := &waiterSetup{cli: admin(t, eps), prefix: uniquePrefix(t), key: "vanishing"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s.ctx = ctx
	clients := make([]*distlock.Client, 3)
	for i := range clients {
		clients[i] = distlock.New(dial(t, eps, s.prefix))
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	var err error
	if s.holder, err = clients[0].Lock(ctx, s.key); err != nil {
		t.Fatal(err)
	}
	s.other = clients[2]
	s.started = time.Now()
	s.waiter = waitFor(ctx, clients[1], s.key, opts...)
	s.entry = queuedBehind(t, s.cli, s.prefix, s.key, s.waiter)
	return s
}

// TestWaiterEntryDeletedKeepsWaiting deletes a waiter's queue entry behind
// its back while it waits: it must queue again, and get the lock once the
// holder releases, alone.
func TestWaiterEntryDeletedKeepsWaiting(t *testing.T) {
	s := setupWaiter(t, distlock.WithWait(30*time.Second))
	if _, err := s.cli.Delete(s.ctx, s.entry); err != nil {
		t.Fatal(err)
	}
	if err := s.holder.Release(s.ctx); err != nil {
		t.Fatal(err)
	}
	l := granted(t, s.waiter)
	soleHolder(t, s.ctx, s.cli, s.other, s.prefix, l)
	if err := l.Release(s.ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWaiterLeaseRevokedKeepsWaiting revokes a waiter's lease while it waits,
// as an expiry during a pause would: its keepalive finds the lease gone, and
// it must queue again with a new lease, then get the lock once the holder
// releases, alone.
func TestWaiterLeaseRevokedKeepsWaiting(t *testing.T) {
	// A 3s lease renews every second, so the revoke is noticed at once.
	s := setupWaiter(t, distlock.WithWait(30*time.Second), distlock.WithLease(3*time.Second))
	if _, err := s.cli.Revoke(s.ctx, leaseOf(t, s.cli, s.entry)); err != nil {
		t.Fatal(err)
	}
	again := queuedBehind(t, s.cli, s.prefix, s.key, s.waiter, s.entry)
	if again == s.entry {
		t.Fatalf("requeued on the revoked entry %q", again)
	}
	if err := s.holder.Release(s.ctx); err != nil {
		t.Fatal(err)
	}
	l := granted(t, s.waiter)
	soleHolder(t, s.ctx, s.cli, s.other, s.prefix, l)
	if err := l.Release(s.ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWaiterLeaseRevokedWaitEnds revokes a waiter's lease while the holder
// keeps the lock: the waiter keeps waiting for its whole budget and then
// returns an error matching ErrNotAcquired, leaving no entry behind.
func TestWaiterLeaseRevokedWaitEnds(t *testing.T) {
	const budget = 2500 * time.Millisecond
	s := setupWaiter(t, distlock.WithWait(budget), distlock.WithLease(3*time.Second))
	if _, err := s.cli.Revoke(s.ctx, leaseOf(t, s.cli, s.entry)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-s.waiter:
		if r.err == nil {
			_ = r.l.Release(s.ctx)
			t.Fatal("waiter got a lock that is held")
		}
		if !errors.Is(r.err, distlock.ErrNotAcquired) {
			t.Fatalf("wait ended with %v, want ErrNotAcquired", r.err)
		}
		if waited := time.Since(s.started); waited < budget-100*time.Millisecond {
			t.Fatalf("wait ended after %v of its %v", waited, budget)
		}
	case <-time.After(budget + 10*time.Second):
		t.Fatal("wait did not end within its budget")
	}
	if q := entries(t, s.cli, s.prefix, s.key); len(q) != 1 {
		t.Fatalf("after the wait ended the queue is %q, want only the holder", q)
	}
	if err := s.holder.Release(s.ctx); err != nil {
		t.Fatal(err)
	}
}
