package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

// entryOf finds token's entry for key: from this backend's record, or by
// reading key's queue. cond holds as long as the entry is still token's.
func (b *Backend) entryOf(ctx context.Context, key, token string) (entry string, lease clientv3.LeaseID, cond clientv3.Cmp, err error) {
	b.mu.Lock()
	h := b.held[token]
	b.mu.Unlock()
	if h != nil {
		return h.entry, h.lease, clientv3.Compare(clientv3.Value(h.entry), "=", h.value), nil
	}
	resp, err := b.cli.Get(ctx, b.dir(key), clientv3.WithPrefix())
	if err != nil {
		return "", 0, clientv3.Cmp{}, err
	}
	for _, kv := range resp.Kvs {
		if v, err := decodeValue(key, kv.Value); err == nil && v.Token == token {
			k := string(kv.Key)
			return k, clientv3.LeaseID(kv.Lease), clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision), nil
		}
	}
	return "", 0, clientv3.Cmp{}, driver.ErrNotHeld
}

// Release deletes token's entry, holder or waiter. An acquisition this
// backend made is deleted by name: the entry is named by the hold's lease,
// which nothing else uses until this release puts it back in the pool, and
// which takes the entry with it if it expires. Any other entry is deleted in
// a transaction that first checks it still carries the token. The freed
// lease is kept for reuse if this backend made the acquisition, and revoked
// otherwise.
func (b *Backend) Release(ctx context.Context, key, token string) error {
	if err := b.checkOpen("release", key); err != nil {
		return err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	b.mu.Lock()
	h := b.held[token]
	b.mu.Unlock()
	var (
		entry string
		lease clientv3.LeaseID
		err   error
	)
	if h != nil {
		entry, lease = h.entry, h.lease
		var resp *clientv3.DeleteResponse
		resp, err = b.cli.Delete(ctx, entry)
		if err == nil && resp.Deleted == 0 {
			err = driver.ErrNotHeld
		}
	} else {
		var cond clientv3.Cmp
		entry, lease, cond, err = b.entryOf(ctx, key, token)
		if err == nil {
			var resp *clientv3.TxnResponse
			resp, err = b.cli.Txn(ctx).If(cond).Then(clientv3.OpDelete(entry)).Commit()
			if err == nil && !resp.Succeeded {
				err = driver.ErrNotHeld
			}
		}
	}
	if err != nil && !errors.Is(err, driver.ErrNotHeld) {
		return b.fail("release", key, err) // retried by token
	}
	h = b.forget(token)
	if err != nil {
		return fmt.Errorf("etcdlock: release %q: %w", key, err)
	}
	if h != nil {
		b.mu.Lock()
		confirmed := h.confirmed
		b.mu.Unlock()
		b.leases.put(lease, h.ttl, confirmed)
		return nil
	}
	_, _ = b.cli.Revoke(ctx, lease) // nothing else is on it; failing that, it expires
	return nil
}

// Renew confirms that token's entry exists and renews its lease for the TTL
// the lease was granted with (ttl is fixed at acquisition on etcd).
func (b *Backend) Renew(ctx context.Context, key, token string, _ time.Duration) error {
	if err := b.checkOpen("renew", key); err != nil {
		return err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	_, lease, cond, err := b.entryOf(ctx, key, token)
	if err == nil {
		var resp *clientv3.TxnResponse
		resp, err = b.cli.Txn(ctx).If(cond).Commit()
		if err == nil && !resp.Succeeded {
			err = driver.ErrNotHeld
		}
	}
	if err != nil {
		return b.fail("renew", key, err)
	}
	sent := time.Now()
	if _, err := b.cli.KeepAliveOnce(ctx, lease); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("etcdlock: renew %q: %w: lease expired", key, driver.ErrNotHeld)
		}
		return b.fail("renew", key, err)
	}
	b.mu.Lock()
	if h := b.held[token]; h != nil {
		h.confirmed = sent
	}
	b.mu.Unlock()
	return nil
}

// Inspect reports the holder of key: the entry with the lowest create
// revision. A free key's last fence is not kept (Info.Fence is 0).
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := b.checkOpen("inspect", key); err != nil {
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
	resp, err := b.cli.Get(ctx, b.dir(key), clientv3.WithFirstCreate()...)
	if err != nil {
		return nil, b.fail("inspect", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0], nil
}

func (b *Backend) info(ctx context.Context, key string, kv *mvccpb.KeyValue) (driver.Info, error) {
	v, err := decodeValue(key, kv.Value)
	if err != nil {
		return driver.Info{}, err
	}
	info := driver.Info{Key: key, Held: true, Fence: uint64(kv.CreateRevision), Meta: v.Meta}
	ttl, err := b.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		return driver.Info{}, b.fail("inspect", key, fmt.Errorf("lease: %w", err))
	}
	info.TTL = time.Duration(max(ttl.TTL, 0)) * time.Second
	return info, nil
}

// List returns the holders of the keys that start with prefix, sorted by key.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	if err := b.checkOpen("list", prefix); err != nil {
		return nil, err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	resp, err := b.cli.Get(ctx, b.prefix+escape(prefix), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, b.fail("list", prefix, err)
	}
	seen := make(map[string]bool)
	var out []driver.Info
	for _, kv := range resp.Kvs {
		key, _, err := b.splitEntry(string(kv.Key))
		if err != nil || seen[key] || !strings.HasPrefix(key, prefix) {
			continue // not a lock entry, or a waiter behind the holder
		}
		seen[key] = true
		info, err := b.info(ctx, key, kv)
		if err != nil {
			return nil, fmt.Errorf("etcdlock: list %q: %w", prefix, err)
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b driver.Info) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// ForceRelease deletes key's holder entry, whatever token it carries, in a
// transaction that checks it is still the entry it read (by create
// revision), then revokes that entry's lease, which nothing else uses. The
// next waiter is granted through its watch, as after a Release. It returns
// what the store knew of the hold it ended, or an error matching
// driver.ErrNotHeld if key was free. The old holder's Renew and Release then
// get driver.ErrNotHeld and free nothing; its backend's watch ends the
// hold's Grant.Lost.
func (b *Backend) ForceRelease(ctx context.Context, key string) (driver.Info, error) {
	if err := b.checkOpen("force release", key); err != nil {
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
			return driver.Info{}, fmt.Errorf("etcdlock: force release %q: %w", key, driver.ErrNotHeld)
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
			return driver.Info{}, b.fail("force release", key, err)
		}
		if resp.Succeeded {
			_, _ = b.cli.Revoke(ctx, clientv3.LeaseID(kv.Lease)) // failing that, it expires
			return info, nil
		}
		// That holder released meanwhile: look at the next one, within ctx.
	}
}
