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
	h := b.holds[token]
	b.mu.Unlock()
	if h != nil {
		return h.path, nil
	}
	parent := b.parent(key)
	children, err := call(ctx, func() ([]string, error) {
		c, _, err := b.conn.Children(parent)
		return c, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return "", driver.ErrNotHeld
	}
	if err != nil {
		return "", err
	}
	name := findToken(children, token)
	if name == "" {
		return "", driver.ErrNotHeld
	}
	return parent + "/" + name, nil
}

// Renew rewrites token's node, which tells the waiter timing its lease that
// it was renewed. It fails without touching the store while the session is
// not connected; the holder then keeps the lock until its validity deadline
// unless the session comes back.
func (b *Backend) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if s := b.conn.State(); s != zk.StateHasSession {
		return fmt.Errorf("zklock: renew %q: session not connected (%v)", key, s)
	}
	node, err := b.node(ctx, key, token)
	if err != nil {
		return fmt.Errorf("zklock: renew %q: %w", key, err)
	}
	b.mu.Lock()
	var data []byte
	if h := b.holds[token]; h != nil {
		data = h.data
	}
	b.mu.Unlock()
	if data == nil {
		raw, err := call(ctx, func() ([]byte, error) {
			raw, _, err := b.conn.Get(node)
			return raw, err
		})
		if err != nil {
			return fmt.Errorf("zklock: renew %q: %w", key, notHeld(err))
		}
		v, err := decodeValue(node, raw)
		if err != nil {
			return err
		}
		data = encodeValue(token, ttl, v.Meta)
	}
	if _, err := call(ctx, func() (*zk.Stat, error) { return b.conn.Set(node, data, -1) }); err != nil {
		return fmt.Errorf("zklock: renew %q: %w", key, notHeld(err))
	}
	return nil
}

// notHeld maps a missing node to ErrNotHeld.
func notHeld(err error) error {
	if errors.Is(err, zk.ErrNoNode) {
		return errors.Join(driver.ErrNotHeld, err)
	}
	return err
}

// Release deletes token's node. Since the token is part of the node's name,
// only that token's node can be deleted. If the queue may be empty now, the
// janitor deletes the parent shortly.
func (b *Backend) Release(ctx context.Context, key, token string) error {
	node, err := b.node(ctx, key, token)
	if err != nil {
		return fmt.Errorf("zklock: release %q: %w", key, err)
	}
	err = b.deleteNode(ctx, node, -1)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("zklock: release %q: %w", key, err)
	}
	b.mu.Lock()
	h := b.holds[token]
	delete(b.holds, token)
	b.mu.Unlock()
	if h != nil {
		h.end()
	}
	if err != nil {
		return fmt.Errorf("zklock: release %q: %w", key, driver.ErrNotHeld)
	}
	b.janitor.mark(path.Dir(node))
	return nil
}

// Inspect reports the holder of key: the node with the lowest sequence.
// Info.TTL is the lease left since the holder's last write, on the server's
// clock as this host reads it. A free key's last fence is not kept.
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	info, err := b.inspect(ctx, key, b.parent(key))
	if err != nil {
		return driver.Info{}, fmt.Errorf("zklock: inspect %q: %w", key, err)
	}
	return info, nil
}

func (b *Backend) inspect(ctx context.Context, key, parent string) (driver.Info, error) {
	for range 3 { // the holder may go between the listing and the read
		children, err := call(ctx, func() ([]string, error) {
			c, _, err := b.conn.Children(parent)
			return c, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return driver.Info{Key: key}, nil
		}
		if err != nil {
			return driver.Info{}, err
		}
		q := sortQueue(children)
		if len(q) == 0 {
			return driver.Info{Key: key}, nil
		}
		holder := parent + "/" + q[0]
		w, err := call(ctx, func() (watched, error) {
			raw, st, err := b.conn.Get(holder)
			return watched{raw: raw, stat: st}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return driver.Info{}, err
		}
		v, err := decodeValue(holder, w.raw)
		if err != nil {
			return driver.Info{}, err
		}
		written := time.UnixMilli(w.stat.Mtime)
		left := min(max(v.ttl()-time.Since(written), 0), v.ttl())
		return driver.Info{Key: key, Held: true, Fence: uint64(w.stat.Czxid), TTL: left, Meta: v.Meta}, nil
	}
	return driver.Info{}, errors.New("the queue kept changing")
}

// List returns the holders of the keys that start with prefix, sorted by key.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	names, err := call(ctx, func() ([]string, error) {
		c, _, err := b.conn.Children(b.root)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("zklock: list %q: %w", prefix, err)
	}
	var out []driver.Info
	for _, name := range names {
		key, ok := keyOf(name)
		if !ok || !strings.HasPrefix(key, prefix) {
			continue
		}
		info, err := b.inspect(ctx, key, b.root+"/"+name)
		if err != nil {
			return nil, fmt.Errorf("zklock: list %q: %w", prefix, err)
		}
		if info.Held {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b driver.Info) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
