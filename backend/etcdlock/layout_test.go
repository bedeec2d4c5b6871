package etcdlock_test

import (
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/driver"
)

// TestKeyLayout holds each namespace to one key layout: clients that name
// a key differently would not exclude each other.
func TestKeyLayout(t *testing.T) {
	e := newStoreEnv(t)
	ordered := etcdlock.WithKeyLayout(etcdlock.KeyLayoutOrdered)
	escaped := etcdlock.WithKeyLayout(etcdlock.KeyLayoutEscaped)
	// layout returns what a new backend in namespace prefix, given opts,
	// learns, and the record the namespace then keeps.
	layout := func(t *testing.T, prefix string, opts ...etcdlock.Option) (etcdlock.KeyLayout, error) {
		b := dial(t, e.eps, prefix, opts...)
		defer b.Close()
		return b.KeyLayout(e.ctx)
	}
	record := func(t *testing.T, prefix string) string {
		resp, err := e.cli.Get(e.ctx, prefix+".layout")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	t.Run("NewNamespaceDefault", func(t *testing.T) {
		p := uniquePrefix(t)
		if l, err := layout(t, p); err != nil || l != etcdlock.KeyLayoutEscaped {
			t.Fatalf("a default backend on a new namespace: %q, %v; want escaped", l, err)
		}
		if r := record(t, p); r != "escaped" {
			t.Fatalf("the namespace records %q, want escaped: a later ordered backend must not start beside this one", r)
		}
		if l, err := layout(t, p, ordered); !errors.Is(err, etcdlock.ErrKeyLayoutMismatch) {
			t.Fatalf("ordered on an escaped namespace: %q, %v; want ErrKeyLayoutMismatch", l, err)
		}
	})
	t.Run("OrderedIsFollowed", func(t *testing.T) {
		p := uniquePrefix(t)
		a := distlock.New(dial(t, e.eps, p, ordered))
		defer a.Close()
		if _, err := a.Lock(e.ctx, "k/1"); err != nil {
			t.Fatal(err)
		}
		b := dial(t, e.eps, p)
		c := distlock.New(b)
		defer c.Close()
		if _, err := c.TryLock(e.ctx, "k/1"); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("a default backend took a key held in the ordered layout: %v", err)
		}
		if l, err := b.KeyLayout(e.ctx); err != nil || l != etcdlock.KeyLayoutOrdered {
			t.Fatalf("the default backend learnt %q, %v; want ordered", l, err)
		}
		if l, err := layout(t, p, escaped); !errors.Is(err, etcdlock.ErrKeyLayoutMismatch) {
			t.Fatalf("escaped on an ordered namespace: %q, %v; want ErrKeyLayoutMismatch", l, err)
		}
	})
	t.Run("EarlierReleaseKeys", func(t *testing.T) {
		// An entry as a client of an earlier release writes it: escaped,
		// with no record of the layout.
		p := uniquePrefix(t)
		lease, err := e.cli.Grant(e.ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		entry := fmt.Sprintf("%s%016x", etcdlock.Dir(p, etcdlock.KeyLayoutEscaped, "k/1"), int64(lease.ID))
		if _, err := e.cli.Put(e.ctx, entry, `{"token":"earlier-release-token-01","meta":{}}`, clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		c := distlock.New(dial(t, e.eps, p, ordered))
		defer c.Close()
		if _, err := c.TryLock(e.ctx, "k/2"); !errors.Is(err, etcdlock.ErrKeyLayoutMismatch) {
			t.Fatalf("ordered over an earlier release's keys: %v, want ErrKeyLayoutMismatch", err)
		}
		all, err := e.cli.Get(e.ctx, p, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil || len(all.Kvs) != 1 {
			t.Fatalf("the refused backend changed the store: %d keys, %v", len(all.Kvs), err)
		}
		if l, err := layout(t, p); err != nil || l != etcdlock.KeyLayoutEscaped {
			t.Fatalf("a default backend there: %q, %v; want escaped", l, err)
		}
	})
	t.Run("UnknownRecord", func(t *testing.T) {
		p := uniquePrefix(t)
		if _, err := e.cli.Put(e.ctx, p+".layout", "sideways"); err != nil {
			t.Fatal(err)
		}
		c := distlock.New(dial(t, e.eps, p))
		defer c.Close()
		if _, err := c.TryLock(e.ctx, "k"); err == nil || errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryLock in a namespace of an unknown layout: %v, want an error", err)
		}
	})
	t.Run("Race", func(t *testing.T) {
		// Backends given each layout start at once on new namespaces:
		// never may both go on, each in its own layout.
		for range 10 {
			p := uniquePrefix(t)
			var wg sync.WaitGroup
			got := make([]etcdlock.KeyLayout, 2)
			errs := make([]error, 2)
			for i, opt := range []etcdlock.Option{ordered, nil} {
				wg.Go(func() {
					var opts []etcdlock.Option
					if opt != nil {
						opts = append(opts, opt)
					}
					got[i], errs[i] = layout(t, p, opts...)
				})
			}
			wg.Wait()
			if errs[1] != nil || (errs[0] == nil) != (got[1] == etcdlock.KeyLayoutOrdered) || (errs[0] != nil && !errors.Is(errs[0], etcdlock.ErrKeyLayoutMismatch)) {
				t.Fatalf("ordered: %q, %v; default: %q, %v", got[0], errs[0], got[1], errs[1])
			}
		}
	})
	t.Run("Invalid", func(t *testing.T) {
		if _, err := etcdlock.New(e.cli, etcdlock.WithKeyLayout("sorted")); !errors.Is(err, driver.ErrInvalidOption) {
			t.Fatalf("WithKeyLayout(sorted): %v, want ErrInvalidOption", err)
		}
		u, _ := url.Parse("etcd://127.0.0.1:2379/x?key_layout=ordered")
		if _, err := etcdlock.ParseURL(u); err != nil {
			t.Fatalf("key_layout=ordered: %v", err)
		}
	})
}

// TestMoveKeyLayout moves a namespace that holds no key to another layout,
// whatever it records, and leaves one that holds a key as it is.
func TestMoveKeyLayout(t *testing.T) {
	e := newStoreEnv(t)
	old := e.client(t)
	if _, err := old.Lock(e.ctx, "k"); err != nil { // records escaped
		t.Fatal(err)
	}
	b := dial(t, e.eps, e.prefix)
	defer b.Close()
	if moved, err := b.MoveKeyLayout(e.ctx, etcdlock.KeyLayoutOrdered); moved || err != nil {
		t.Fatalf("MoveKeyLayout of a namespace that holds a key: %v, %v; want false, nil", moved, err)
	}
	if l, err := b.KeyLayout(e.ctx); err != nil || l != etcdlock.KeyLayoutEscaped {
		t.Fatalf("after a refused move: %q, %v; want escaped", l, err)
	}
	if _, err := b.MoveKeyLayout(e.ctx, etcdlock.KeyLayoutOrdered); err == nil {
		t.Fatal("MoveKeyLayout after the backend's first call succeeded")
	}
	if err := old.Close(); err != nil { // releases k
		t.Fatal(err)
	}
	moving := dial(t, e.eps, e.prefix)
	defer moving.Close()
	if moved, err := moving.MoveKeyLayout(e.ctx, etcdlock.KeyLayoutOrdered); !moved || err != nil {
		t.Fatalf("MoveKeyLayout of an empty namespace: %v, %v; want true", moved, err)
	}
	if l := layoutOf(t, e.cli, e.prefix); l != etcdlock.KeyLayoutOrdered {
		t.Fatalf("the namespace records %q after the move, want ordered", l)
	}
	if _, err := moving.MoveKeyLayout(e.ctx, "sorted"); !errors.Is(err, driver.ErrInvalidOption) {
		t.Fatalf("MoveKeyLayout(sorted): %v, want ErrInvalidOption", err)
	}
}
