package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

// A read-write lock N keeps, under internal names as a semaphore does (see
// semaphore.go):
//
//	PREFIX/%00rw%00esc(N)%00s/LEASE        a reader's hold, on its own lease, as a lock's entry
//	PREFIX/%00rw%00esc(N)%00x/LEASE        a writer's hold, likewise
//	PREFIX/%00rw%00esc(N)%00i/esc(INTENT)  a waiting writer's intent, on a lease of driver.WriteIntentTTL
//
// An attempt is one transaction whose compares test that directories are
// empty (a Compare of CreateRevision = 0 over a key prefix holds when no
// key in the prefix exists): a reader is granted while the writers' and the
// intents' directories are empty, a writer while both holds' directories
// are. Each hold is held like a lock, through the same code (Renew, Release,
// move on Extend, loss watch, lease pool); its fence is its entry's create
// revision, one sequence for both modes.
//
// A downgrade (DowngradeRW) leaves the writer's entry where it is and puts
// it again with Shared set in its value: the same key, lease and create
// revision, so the hold keeps its TTL, fence and record, and a writer, which
// wants the writers' directory empty, still waits for it. A reader is
// granted beside it by a second transaction, made when the first finds the
// writers' directory holding one entry, a downgraded one: it compares that
// every key there has that entry's create revision, and that no intent
// exists. Clients of earlier releases take the entry for a writer's: their
// readers wait for it to end, which is safe.

var (
	_ driver.RWLocks      = (*Backend)(nil)
	_ driver.RWDowngrader = (*Backend)(nil)
)

// rwBase is the internal name every key of read-write lock name starts with.
func rwBase(name string) string { return rwPrefix + name + "\x00" }

// rwPrefix starts every read-write lock's internal names.
const rwPrefix = "\x00rw\x00"

// rwHoldKey is the internal lock key whose queue holds name's holds of mode.
func rwHoldKey(name string, mode driver.Mode) string {
	if mode == driver.Shared {
		return rwBase(name) + "s"
	}
	return rwBase(name) + "x"
}

// intentKey is the store key of a waiting writer's intent on name.
func (b *Backend) intentKey(name, intent string) string { return b.intentDir(name) + b.esc(intent) }

// intentDir is the directory of name's intents.
func (b *Backend) intentDir(name string) string { return b.dir(rwBase(name) + "i") }

// empty holds when no key under dir exists.
func empty(dir string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(dir), "=", 0).WithPrefix()
}

// AcquireRW takes req.Key in mode in one transaction that puts the hold's
// entry if the directories that exclude it are empty; a granted writer's
// transaction deletes its intent. A reader refused by a downgraded writer's
// entry alone tries a second transaction that allows that entry (see
// above). A writer refused with req.Intent records it, or renews the lease
// of the one it recorded before; refused by its own token's hold (an
// attempt whose reply was lost), it is granted that hold again.
func (b *Backend) AcquireRW(ctx context.Context, req driver.AcquireRequest, mode driver.Mode) (driver.Grant, error) {
	if err := b.ready(ctx); err != nil {
		return driver.Grant{}, err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	key, val := rwHoldKey(req.Key, mode), encodeValue(req.Token, req.Meta)
	xdir, noIntent := b.dir(rwHoldKey(req.Key, driver.Exclusive)), empty(b.intentDir(req.Key))
	cond := []clientv3.Cmp{empty(xdir), noIntent}
	if mode == driver.Exclusive {
		cond[1] = empty(b.dir(rwHoldKey(req.Key, driver.Shared)))
	}
	recording := mode == driver.Exclusive && req.Intent != ""
	var then, els []clientv3.Op
	switch {
	case mode == driver.Exclusive:
		// A refused writer reads the writers' directory: its token's own
		// hold there is an attempt whose reply was lost.
		els = append(els, clientv3.OpGet(xdir, clientv3.WithPrefix(), clientv3.WithLimit(2)))
		if recording {
			ik := b.intentKey(req.Key, req.Intent)
			then, els = append(then, clientv3.OpDelete(ik)), append(els, clientv3.OpGet(ik))
		}
	case mode == driver.Shared:
		els = append(els, clientv3.OpGet(xdir, clientv3.WithPrefix(), clientv3.WithLimit(2)),
			clientv3.OpGet(b.intentDir(req.Key), clientv3.WithPrefix(), clientv3.WithCountOnly()))
	}
	var entry string
	t, resp, err := b.leased(ctx, req.TTL, func(id clientv3.LeaseID) (*clientv3.TxnResponse, error) {
		entry = b.entryKey(key, id)
		put := clientv3.OpPut(entry, val, clientv3.WithLease(id))
		resp, err := b.cli.Txn(ctx).If(cond...).Then(append(then, put)...).Else(els...).Commit()
		if err != nil || resp.Succeeded || mode != driver.Shared {
			return resp, err
		}
		x := resp.Responses[0].GetResponseRange().Kvs
		if len(x) != 1 || !downgraded(x[0].Value) || resp.Responses[1].GetResponseRange().Count > 0 {
			return resp, nil
		}
		// Beside a downgraded writer's hold, as long as it is the writers'
		// directory's only entry and no writer waits.
		return b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(xdir), "=", x[0].CreateRevision).WithPrefix(), noIntent).
			Then(put).
			Commit()
	})
	if err != nil {
		return driver.Grant{}, b.fail(err)
	}
	if resp.Succeeded {
		return b.granted(req.Token, entry, t, resp.Header.Revision, req.TTL), nil
	}
	b.leases.put(t.id, t.ttl, t.confirmed) // nothing was put on it
	if mode == driver.Exclusive {
		if x := resp.Responses[0].GetResponseRange().Kvs; len(x) == 1 && ofToken(x[0].Value, req.Token) {
			return b.writerAgain(ctx, req, x[0])
		}
	}
	if recording {
		if err := b.recordIntent(ctx, b.intentKey(req.Key, req.Intent), resp.Responses[1].GetResponseRange().Kvs); err != nil {
			return driver.Grant{}, b.fail(fmt.Errorf("record write intent: %w", err))
		}
	}
	return driver.Grant{}, fmt.Errorf("%w: %s refused", driver.ErrNotAcquired, mode)
}

// writerAgain grants req again on kv, the writers' only entry, which
// req.Token holds (see grantedAgain), and takes its intent away.
func (b *Backend) writerAgain(ctx context.Context, req driver.AcquireRequest, kv *mvccpb.KeyValue) (driver.Grant, error) {
	g, err := b.grantedAgain(ctx, rwHoldKey(req.Key, driver.Exclusive), req, kv)
	if err == nil && req.Intent != "" {
		_, _ = b.cli.Delete(ctx, b.intentKey(req.Key, req.Intent)) // failing, the intent keeps readers out until its lease ends
	}
	return g, err
}

// recordIntent renews the lease of the intent key ik if kvs holds it, and
// otherwise puts ik on a lease of driver.WriteIntentTTL. It records a
// waiting writer's intent here, and a waiting request's for permits (see
// semaphore.go).
func (b *Backend) recordIntent(ctx context.Context, ik string, kvs []*mvccpb.KeyValue) error {
	if len(kvs) > 0 {
		if _, err := b.leases.renew.keepAlive(ctx, clientv3.LeaseID(kvs[0].Lease)); err == nil {
			return nil
		}
		// Expired meanwhile, or unknown: put it on a lease that is.
	}
	_, _, err := b.leased(ctx, driver.WriteIntentTTL, func(id clientv3.LeaseID) (*clientv3.TxnResponse, error) {
		return b.cli.Txn(ctx).Then(clientv3.OpPut(ik, "", clientv3.WithLease(id))).Commit()
	})
	return err
}

// downgraded reports whether raw, a hold entry's value, is that of a
// writer's hold made a reader's by a downgrade.
func downgraded(raw []byte) bool {
	v, err := decodeValue(raw)
	return err == nil && v.Shared
}

// rwHoldKeys returns the internal keys token's hold of name may be in: the
// one this backend granted it in, or, for a hold it did not grant, both.
func (b *Backend) rwHoldKeys(name, token string) []string {
	keys := []string{rwHoldKey(name, driver.Shared), rwHoldKey(name, driver.Exclusive)}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		if b.holdingOf(k, token) != nil {
			return []string{k}
		}
	}
	return keys
}

// RenewRW renews token's hold of name as Renew renews a lock.
func (b *Backend) RenewRW(ctx context.Context, name, token string, ttl time.Duration) error {
	return b.eachHoldKey(ctx, name, token, func(key string) error { return b.Renew(ctx, key, token, ttl) })
}

// ReleaseRW deletes token's hold of name as Release deletes a lock's
// entry; the deletion wakes name's watchers.
func (b *Backend) ReleaseRW(ctx context.Context, name, token string) error {
	return b.eachHoldKey(ctx, name, token, func(key string) error { return b.Release(ctx, key, token) })
}

// eachHoldKey runs fn on the internal keys token's hold of name may be in,
// until one does not fail with driver.ErrNotHeld.
func (b *Backend) eachHoldKey(ctx context.Context, name, token string, fn func(key string) error) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	var err error
	for _, key := range b.rwHoldKeys(name, token) {
		if err = fn(key); !errors.Is(err, driver.ErrNotHeld) {
			break
		}
	}
	return err
}

// WithdrawIntent deletes intent's key, which wakes name's watchers. Its
// lease expires by itself.
func (b *Backend) WithdrawIntent(ctx context.Context, name, intent string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	if _, err := b.cli.Delete(ctx, b.intentKey(name, intent)); err != nil {
		return b.fail(err)
	}
	return nil
}

// DowngradeRW puts token's writer's entry of name again with Shared set in
// its value, in one transaction that compares the entry's create revision
// and value with those just read (a linearizable read). The put keeps the
// entry's lease (WithIgnoreLease), and so its TTL, and its create revision,
// the fence; this backend's record of the hold, its renewals and its loss
// watch, which all name the entry by create revision, carry on. The put
// wakes name's watchers (WatchRW). A token without a writer's entry is
// confirmed to hold a reader's, as Renew confirms a hold, and left as it
// is; one holding neither gets driver.ErrNotHeld.
func (b *Backend) DowngradeRW(ctx context.Context, name, token string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	xdir := b.dir(rwHoldKey(name, driver.Exclusive))
	// A transaction that fails finds, at the next read, the entry gone (the
	// hold ended), or downgraded by a call of its own.
	for range 3 {
		resp, err := b.cli.Get(ctx, xdir, clientv3.WithPrefix())
		if err != nil {
			return b.fail(err)
		}
		i := slices.IndexFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool {
			v, err := decodeValue(kv.Value)
			return err == nil && v.Token == token
		})
		if i < 0 {
			return b.heldShared(ctx, name, token)
		}
		kv := resp.Kvs[i]
		v, _ := decodeValue(kv.Value)
		if v.Shared {
			return nil
		}
		v.Shared = true
		entry := string(kv.Key)
		tr, err := b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(entry), "=", kv.CreateRevision),
				clientv3.Compare(clientv3.Value(entry), "=", string(kv.Value))).
			Then(clientv3.OpPut(entry, v.encode(), clientv3.WithIgnoreLease())).
			Commit()
		if err != nil {
			return b.fail(err)
		}
		if tr.Succeeded {
			return nil
		}
	}
	return b.fail(fmt.Errorf("downgrade %q: the writer's entry kept changing", name))
}

// heldShared returns nil if token holds name as a reader, by a
// linearizable read, and otherwise an error matching driver.ErrNotHeld.
func (b *Backend) heldShared(ctx context.Context, name, token string) error {
	key := rwHoldKey(name, driver.Shared)
	b.mu.Lock()
	h := b.holdingOf(key, token)
	b.mu.Unlock()
	entry, _, cond, err := b.entryOf(ctx, h, key, token)
	if err == nil {
		var resp *clientv3.TxnResponse
		resp, err = b.cli.Txn(ctx).If(cond).Then(linearizable(entry)).Commit()
		if err == nil && !resp.Succeeded {
			err = driver.ErrNotHeld
		}
	}
	if err != nil {
		return b.fail(err)
	}
	return nil
}

// InspectRW reads name's holds, oldest first, and counts its intents, at
// one revision. A downgraded writer's hold is a reader's.
func (b *Backend) InspectRW(ctx context.Context, name string) (driver.Mode, []driver.Info, int, error) {
	if err := b.ready(ctx); err != nil {
		return 0, nil, 0, err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	holds := func(mode driver.Mode) clientv3.Op {
		return clientv3.OpGet(b.dir(rwHoldKey(name, mode)), clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	}
	resp, err := b.cli.Txn(ctx).Then(
		holds(driver.Exclusive), holds(driver.Shared),
		clientv3.OpGet(b.intentDir(name), clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return 0, nil, 0, b.fail(err)
	}
	mode, kvs := driver.Shared, resp.Responses[1].GetResponseRange().Kvs
	if x := resp.Responses[0].GetResponseRange().Kvs; len(x) > 0 {
		kvs = append(x, kvs...) // older than any reader beside it
		if slices.ContainsFunc(x, func(kv *mvccpb.KeyValue) bool { return !downgraded(kv.Value) }) {
			mode = driver.Exclusive // readers beside it: never granted so
		}
	}
	held, err := b.infos(ctx, holdersOf(name, kvs))
	if err != nil {
		return 0, nil, 0, err
	}
	return mode, held, int(resp.Responses[2].GetResponseRange().Count), nil
}

// WatchRW fires when a hold of name or an intent on it is deleted
// (released, expired, withdrawn, granted), and when a writer's hold is
// downgraded: its entry is put with Shared set. A downgraded hold's move to
// another lease (Extend) puts that value again, a needless wake-up.
func (b *Backend) WatchRW(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if err := b.ready(ctx); err != nil {
		return nil, nil, err
	}
	return b.watchPrefix(ctx, name, b.prefix+b.esc(rwBase(name)), func(_ context.Context, ev *clientv3.Event) bool {
		return ev.Type == mvccpb.DELETE || downgraded(ev.Kv.Value)
	})
}
