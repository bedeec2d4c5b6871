package zklock

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

// node returns token's node for key: from the holds of this backend, or by
// listing key's queue.
func (b *Backend) node(ctx context.Context, key, token string) (string, error) {
	b.mu.Lock()
	h := b.holdOf(key, token)
	b.mu.Unlock()
	if h != nil {
		return h.path, nil
	}
	node, err := b.findNode(ctx, key, token)
	if err == nil && node == "" {
		err = driver.ErrNotHeld
	}
	return node, err
}

// Renew rewrites token's node, which tells the waiter timing its lease that
// it was renewed. It fails without touching the store while the session is
// not connected; the holder then keeps the lock until its validity deadline
// unless the session comes back.
func (b *Backend) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Wrap("zklock", err)
	}
	defer stop()
	if err := b.renew(ctx, key, token, ttl); err != nil {
		return driver.Wrap("zklock", err)
	}
	return nil
}

func (b *Backend) renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if s := b.conn.State(); s != zk.StateHasSession {
		return fmt.Errorf("session not connected (%v)", s)
	}
	node, err := b.node(ctx, key, token)
	if err != nil {
		return err
	}
	data := b.holdData(key, token, ttl)
	if data == nil {
		raw, err := call(ctx, b, func() ([]byte, error) {
			raw, _, err := b.conn.Get(node)
			return raw, err
		}, nil)
		if err != nil {
			return notHeld(err)
		}
		v, err := decodeValue(node, raw)
		if err != nil {
			return err
		}
		data = encodeValue(token, ttl, v.Meta)
	}
	_, err = call(ctx, b, func() (*zk.Stat, error) { return b.conn.Set(node, data, -1) }, nil)
	return notHeld(err)
}

// holdData returns the node value of token's hold of key for ttl, or nil if
// this backend has no such hold. A new ttl (an extension) is kept for the
// next renewals.
func (b *Backend) holdData(key, token string, ttl time.Duration) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.holdOf(key, token)
	if h == nil {
		return nil
	}
	if h.ttl != ttl {
		h.ttl, h.data = ttl, encodeValue(token, ttl, h.meta)
	}
	return h.data
}

// holdOf returns this backend's hold of key by token, or nil: a token names
// the key it was granted for, and no other. b.mu must be held.
func (b *Backend) holdOf(key, token string) *hold {
	h := b.holds[token]
	if h == nil || path.Dir(h.path) != b.parent(key) {
		return nil
	}
	return h
}

// notHeld maps a missing node to ErrNotHeld.
func notHeld(err error) error {
	if errors.Is(err, zk.ErrNoNode) {
		return errors.Join(driver.ErrNotHeld, err)
	}
	return err
}

// Release deletes token's node. Since the token is part of the node's name,
// only that token's node can be deleted. A node already gone means the hold
// was lost: Release returns ErrNotHeld and reports the hold lost. If the
// queue may be empty now, the janitor deletes the parent shortly.
func (b *Backend) Release(ctx context.Context, key, token string) error {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Wrap("zklock", err)
	}
	defer stop()
	node, err := b.node(ctx, key, token)
	if err != nil {
		return driver.Wrap("zklock", err)
	}
	err = b.deleteNode(ctx, node, -1)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return driver.Wrap("zklock", err)
	}
	b.mu.Lock()
	h := b.holdOf(key, token)
	if h != nil {
		delete(b.holds, token)
	}
	b.mu.Unlock()
	if h != nil && err != nil {
		h.lose() // the node was gone: the hold had been lost, not released
	}
	if h != nil {
		h.end()
	}
	if err != nil {
		return driver.ErrNotHeld
	}
	b.janitor.mark(path.Dir(node))
	return nil
}

// Inspect reports the holder of key: the node with the lowest sequence.
// Info.TTL is the lease left since the holder's last write, on the server's
// clock as this host reads it. A free key's last fence is not kept.
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Info{}, driver.Wrap("zklock", err)
	}
	defer stop()
	h, err := b.holder(ctx, b.parent(key))
	if err != nil {
		return driver.Info{}, driver.Wrap("zklock", err)
	}
	return h.info(key), nil
}

// holding is what the store says of a key's holder.
type holding struct {
	node string // "" if the key is free
	val  value
	stat *zk.Stat
}

// info describes the hold for Inspect.
func (h holding) info(key string) driver.Info {
	if h.node == "" {
		return driver.Info{Key: key}
	}
	written := time.UnixMilli(h.stat.Mtime)
	left := min(max(h.val.ttl()-time.Since(written), 0), h.val.ttl())
	return driver.Info{Key: key, Held: true, Fence: uint64(h.stat.Czxid), TTL: left, Meta: h.val.Meta, Permits: h.val.Permits}
}

// holder reads the holder of the queue under parent: the first entry of the
// listed queue that is still there when read. Entries are never inserted
// ahead of others, so once the entries before it are gone, it holds. The
// queue is listed again, at most three times, only if every listed entry
// went before it was read.
func (b *Backend) holder(ctx context.Context, parent string) (holding, error) {
	for range 3 {
		children, err := call(ctx, b, func() ([]string, error) {
			c, _, err := b.conn.Children(parent)
			return c, err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			return holding{}, nil
		}
		if err != nil {
			return holding{}, err
		}
		q := sortQueue(children)
		if len(q) == 0 {
			return holding{}, nil
		}
		for _, name := range q {
			node := parent + "/" + name
			w, err := call(ctx, b, func() (watched, error) {
				raw, st, err := b.conn.Get(node)
				return watched{raw: raw, stat: st}, err
			}, nil)
			if errors.Is(err, zk.ErrNoNode) {
				continue // it went: the next one holds, if it is still there
			}
			if err != nil {
				return holding{}, err
			}
			v, err := decodeValue(node, w.raw)
			if err != nil {
				return holding{}, err
			}
			return holding{node: node, val: v, stat: w.stat}, nil
		}
	}
	return holding{}, errors.New("the queue kept changing")
}

// ForceRelease deletes the node of key's holder (the lowest sequence), by
// the version it read, whatever token holds it, and returns what the node
// said of the hold. The waiter next in line is granted through its watch;
// the old holder's Renew and Release get ErrNotHeld, and it learns of the
// loss from its node's watch or its next renewal. A free key returns
// ErrNotHeld and changes nothing.
func (b *Backend) ForceRelease(ctx context.Context, key string, _ driver.ForceOptions) (driver.Info, error) {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Info{}, driver.Wrap("zklock", err)
	}
	defer stop()
	info, err := b.forceRelease(ctx, key)
	if err != nil {
		return driver.Info{}, driver.Wrap("zklock", err)
	}
	return info, nil
}

func (b *Backend) forceRelease(ctx context.Context, key string) (driver.Info, error) {
	parent := b.parent(key)
	for range 3 { // the holder may renew, or go, between the read and the delete
		h, err := b.holder(ctx, parent)
		if err != nil {
			return driver.Info{}, err
		}
		if h.node == "" {
			return driver.Info{}, driver.ErrNotHeld
		}
		info := h.info(key) // its TTL as of the read, before the delete
		err = b.deleteNode(ctx, h.node, h.stat.Version)
		switch {
		case err == nil:
			b.janitor.mark(parent)
			return info, nil
		case !errors.Is(err, zk.ErrBadVersion) && !errors.Is(err, zk.ErrNoNode):
			return driver.Info{}, err
		}
	}
	return driver.Info{}, errors.New("the holder kept changing")
}

// List returns the holders of the keys that start with prefix, sorted by key.
// It reads the names of every key under the root, then the holder of each
// key of the prefix.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return nil, driver.Wrap("zklock", err)
	}
	defer stop()
	out, err := b.listHolders(ctx, prefix, "", -1)
	if err != nil {
		return nil, driver.Wrap("zklock", err)
	}
	return out, nil
}

// ListPage returns, sorted by key, at most limit holders of the keys that
// start with prefix and sort after after. ZooKeeper keeps no order of a
// node's children to read a page from, so it reads the names of every key
// under the root, as List does, then the holders of the keys after after,
// in order, until limit are held: one holder read per lock of the page,
// plus one per key without a holder, where List reads the holder of every
// key of the prefix.
func (b *Backend) ListPage(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit %d, want at least 1", driver.ErrInvalidOption, limit)
	}
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return nil, driver.Wrap("zklock", err)
	}
	defer stop()
	out, err := b.listHolders(ctx, prefix, after, limit)
	if err != nil {
		return nil, driver.Wrap("zklock", err)
	}
	return out, nil
}

// listHolders returns, sorted by key, the first limit holders (all if
// limit < 0) of the keys that start with prefix and sort after after.
func (b *Backend) listHolders(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	names, err := call(ctx, b, func() ([]string, error) {
		c, _, err := b.conn.Children(b.root)
		return c, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil // no lock was ever taken under this root
	}
	if err != nil {
		return nil, err
	}
	type child struct{ key, name string }
	var keys []child
	for _, name := range names {
		if key, ok := keyOf(name); ok && strings.HasPrefix(key, prefix) && key > after {
			keys = append(keys, child{key, name})
		}
	}
	slices.SortFunc(keys, func(a, b child) int { return strings.Compare(a.key, b.key) })
	var out []driver.Info
	for _, c := range keys {
		if len(out) == limit {
			break
		}
		h, err := b.holder(ctx, b.root+"/"+c.name)
		if err != nil {
			return nil, err
		}
		if h.node != "" {
			out = append(out, h.info(c.key))
		}
	}
	return out, nil
}
