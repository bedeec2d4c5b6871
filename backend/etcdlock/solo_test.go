package etcdlock_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
)

// TestFreeKeyWritesOneKey: taking a free key and releasing it writes one
// key to the store and deletes it, as etcd's own lock service does; the
// queue's tail key is written only once a waiter queues. Counted from a
// watch of the namespace, for Lock (which queues) and TryLock, with and
// without linked queues.
func TestFreeKeyWritesOneKey(t *testing.T) {
	e := newStoreEnv(t)
	for _, mode := range []struct {
		name string
		opts []etcdlock.Option
	}{{"plain", nil}, {"linked", []etcdlock.Option{etcdlock.WithLinkedQueue()}}} {
		t.Run(mode.name, func(t *testing.T) {
			prefix := e.prefix + "/" + mode.name
			c := distlock.New(dial(t, e.eps, prefix, mode.opts...))
			defer c.Close()
			for _, take := range []struct {
				name string
				lock func(ctx context.Context, key string) (*distlock.Lock, error)
			}{
				{"Lock", func(ctx context.Context, key string) (*distlock.Lock, error) {
					return c.Lock(ctx, key, distlock.WithWait(5*time.Second))
				}},
				{"TryLock", func(ctx context.Context, key string) (*distlock.Lock, error) { return c.TryLock(ctx, key) }},
			} {
				key := "free-" + take.name
				if l, err := take.lock(e.ctx, key); err != nil { // the namespace's first call reads its layout
					t.Fatal(err)
				} else if err := l.Release(e.ctx); err != nil {
					t.Fatal(err)
				}
				from := revision(t, e.cli)
				l, err := take.lock(e.ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(e.ctx); err != nil {
					t.Fatal(err)
				}
				puts, deletes := writesSince(t, e.cli, prefix, from)
				if len(puts) != 1 || len(deletes) != 1 {
					t.Errorf("%s and Release of a free key wrote %q and deleted %q; want one key written and deleted", take.name, puts, deletes)
				}
			}
		})
	}
}

// revision returns the store's current revision.
func revision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), "revision-probe")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// writesSince returns the keys under prefix put and deleted after revision
// from, up to the store's current revision, from a watch.
func writesSince(t *testing.T, cli *clientv3.Client, prefix string, from int64) (puts, deletes []string) {
	t.Helper()
	to := revision(t, cli)
	if to == from {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for resp := range cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from+1)) {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypePut {
				puts = append(puts, string(ev.Kv.Key))
			} else {
				deletes = append(deletes, string(ev.Kv.Key))
			}
		}
		if resp.Header.Revision >= to {
			return puts, deletes
		}
	}
	t.Fatal("the watch ended before the store's revision")
	return nil, nil
}
