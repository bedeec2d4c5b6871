package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

// KeyLayout names a way of storing lock keys in a namespace (see keys.go).
// Clients that store a key under different names do not exclude each
// other, so each namespace records its layout, in the key PREFIX.layout
// (the namespace without its trailing slash, then ".layout"), and every
// backend of this release follows the record.
type KeyLayout string

const (
	// KeyLayoutEscaped is the layout of every earlier release, and of a
	// namespace that records no other. A page of List reads the whole
	// namespace, since the stored names do not keep the keys' order.
	KeyLayoutEscaped KeyLayout = "escaped"
	// KeyLayoutOrdered keeps the keys' byte order in the stored names, so
	// that a page of List reads about a page from the store. Clients of
	// earlier releases neither know it nor read the record: a namespace
	// takes it only while it holds no key.
	KeyLayoutOrdered KeyLayout = "ordered"
)

// ErrKeyLayoutMismatch means the namespace records another key layout than
// the backend was given (WithKeyLayout, key_layout), or holds keys of an
// earlier release where the backend was to record the ordered layout: its
// clients name keys otherwise, so the backend takes nothing.
var ErrKeyLayoutMismatch = errors.New("etcdlock: key layout mismatch")

func (k KeyLayout) layout() (*keyLayout, error) {
	switch k {
	case KeyLayoutEscaped:
		return escapedLayout, nil
	case KeyLayoutOrdered:
		return orderedLayout, nil
	}
	return nil, fmt.Errorf("%w: key layout %q: want %q or %q", driver.ErrInvalidOption, string(k), KeyLayoutEscaped, KeyLayoutOrdered)
}

// layoutKey returns the key recording the namespace's layout: beside the
// namespace, not in it, so that no range of the namespace reads it.
func (b *Backend) layoutKey() string { return strings.TrimSuffix(b.prefix, "/") + ".layout" }

// KeyLayout returns the namespace's key layout, learning it from the store
// if no call has yet: the recorded one, or, where none is recorded, the
// one the backend was given (escaped by default), which it records. It
// fails as every call of the backend then does: with ErrKeyLayoutMismatch
// if the namespace records another layout than the one given, or holds
// keys of an earlier release where the ordered one was given.
func (b *Backend) KeyLayout(ctx context.Context) (KeyLayout, error) {
	if err := b.ready(ctx); err != nil {
		return "", err
	}
	return KeyLayout(b.keys().name), nil
}

// ready returns driver.ErrClosed once the backend is closed, and otherwise
// makes sure that it knows its namespace's layout, which every key it
// names depends on. Calls that name keys start with it.
func (b *Backend) ready(ctx context.Context) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	if b.layout.Load() != nil {
		return nil
	}
	b.learning.Lock()
	defer b.learning.Unlock()
	if b.layout.Load() != nil {
		return nil
	}
	l, err := b.learnLayout(ctx)
	if err != nil {
		return err
	}
	b.layout.Store(l)
	return nil
}

// learnLayout reads the namespace's layout, or records the backend's where
// none is: in one transaction, which for the ordered layout also checks
// that the namespace holds no key (of an earlier release).
func (b *Backend) learnLayout(ctx context.Context) (*keyLayout, error) {
	ctx, cancel := b.request(ctx)
	defer cancel()
	want := b.wantLayout
	if want == nil {
		want = escapedLayout
	}
	record := b.layoutKey()
	cond := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(record), "=", 0)}
	if want == orderedLayout {
		cond = append(cond, clientv3.Compare(clientv3.CreateRevision(b.prefix), "=", 0).WithPrefix())
	}
	resp, err := b.cli.Txn(ctx).If(cond...).Then(clientv3.OpPut(record, want.name)).Else(clientv3.OpGet(record)).Commit()
	if err != nil {
		return nil, b.fail(err)
	}
	if resp.Succeeded {
		return want, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil, fmt.Errorf("%w: namespace %q holds keys but records no layout: a client of an earlier release, which keeps keys escaped, uses it; give the ordered layout a new namespace",
			ErrKeyLayoutMismatch, strings.TrimSuffix(b.prefix, "/"))
	}
	got, err := KeyLayout(kvs[0].Value).layout()
	switch {
	case err != nil:
		return nil, fmt.Errorf("etcdlock: namespace %q records the key layout %q, which this release does not know", strings.TrimSuffix(b.prefix, "/"), kvs[0].Value)
	case b.wantLayout != nil && got != b.wantLayout:
		return nil, fmt.Errorf("%w: namespace %q records %q, the backend was given %q", ErrKeyLayoutMismatch, strings.TrimSuffix(b.prefix, "/"), got.name, b.wantLayout.name)
	}
	return got, nil
}

// MoveKeyLayout records layout as the namespace's if the namespace holds no
// key, whatever it records now, and reports whether it did; the backend
// then uses it. It is only for a namespace that no other backend uses
// meanwhile, since one that runs keeps the layout it learnt and would not
// exclude this one: serve calls it at start on its embedded store, which no
// other process reaches. It must come before the backend's first call.
func (b *Backend) MoveKeyLayout(ctx context.Context, layout KeyLayout) (bool, error) {
	l, err := layout.layout()
	if err != nil {
		return false, fmt.Errorf("etcdlock: MoveKeyLayout: %w", err)
	}
	if err := b.checkOpen(); err != nil {
		return false, err
	}
	b.learning.Lock()
	defer b.learning.Unlock()
	if b.layout.Load() != nil {
		return false, errors.New("etcdlock: MoveKeyLayout after the backend's first call, which learnt the layout")
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(b.prefix), "=", 0).WithPrefix()).
		Then(clientv3.OpPut(b.layoutKey(), l.name)).
		Commit()
	switch {
	case err != nil:
		return false, b.fail(err)
	case !resp.Succeeded:
		return false, nil // the backend learns the recorded layout at its first call
	}
	b.layout.Store(l)
	return true, nil
}
