package etcdlock

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

// List returns the holders of the keys that start with prefix, sorted by key.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	return b.list(ctx, prefix, "", -1)
}

// ListPage returns, sorted by key, at most limit holders of the keys that
// start with prefix and sort after after. It reads the prefix's entries in
// one request, as List does, but asks for the lease of the page's holders
// only: a lease's TTL is one request per holder, which at a thousand keys
// cost List most of its time.
func (b *Backend) ListPage(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit %d, want at least 1", driver.ErrInvalidOption, limit)
	}
	return b.list(ctx, prefix, after, limit)
}

// list returns the holders of the keys that start with prefix and sort
// after after, sorted by key: at most limit of them unless limit is -1.
func (b *Backend) list(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	if err := b.checkOpen(); err != nil {
		return nil, err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	held, err := b.holders(ctx, prefix)
	if err != nil {
		return nil, b.fail(err)
	}
	held = slices.DeleteFunc(held, func(h keyHolder) bool { return h.key <= after })
	slices.SortFunc(held, func(x, y keyHolder) int { return strings.Compare(x.key, y.key) })
	if limit >= 0 && len(held) > limit {
		held = held[:limit]
	}
	out := make([]driver.Info, 0, len(held))
	for _, h := range held {
		info, err := b.info(ctx, h.key, h.kv)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", h.key, err) // a key under the prefix, which the caller names
		}
		out = append(out, info)
	}
	return out, nil
}

// keyHolder is a lock key and its holder's entry.
type keyHolder struct {
	key string
	kv  *mvccpb.KeyValue
}

// holders reads, in one request, the holder entry of every lock key that
// starts with prefix: the entry of lowest create revision in its directory.
// Entries of semaphores and read-write locks are not lock entries and are
// left out.
func (b *Backend) holders(ctx context.Context, prefix string) ([]keyHolder, error) {
	resp, err := b.cli.Get(ctx, b.prefix+escape(prefix), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool)
	var out []keyHolder
	for _, kv := range resp.Kvs {
		key, _, err := b.splitEntry(string(kv.Key))
		if err != nil || seen[key] || !strings.HasPrefix(key, prefix) || driver.ValidateKey(key) != nil {
			continue // not a lock entry (a semaphore's, a read-write lock's), or a waiter behind the holder
		}
		seen[key] = true
		out = append(out, keyHolder{key, kv})
	}
	return out, nil
}
