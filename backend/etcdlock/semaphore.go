package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

// Semaphores and read-write locks keep their entries in queues of the same
// shape as a lock's (see keys.go), under internal names that start with a
// NUL byte: driver.ValidateKey refuses control characters, so no lock's key
// is ever one of them, and no lock's directory can hold their entries. For
// a semaphore S:
//
//	PREFIX/%00sem%00esc(S)%00p/LEASE           a hold of permits, on its own lease, as a lock's entry
//	PREFIX/%00sem%00esc(S)%00limit             the number of permits, without a lease
//	PREFIX/%00sem%00esc(S)%00i/esc(INTENT)     a waiting request's intent, on a lease of driver.WriteIntentTTL
//
// and the read-write locks' layout is in rwlock.go. The common prefix
// PREFIX/%00sem%00esc(S)%00 belongs to S alone (another valid name cannot
// continue esc(S) with %00), so one watch on it sees S's releases, limit
// changes and ended intents, and nothing else's.
//
// A hold is held like a lock, through the same code: Renew and Release by
// token on its entry, a move to another lease on Extend, a loss watch that
// ends Grant.Lost when the entry vanishes, the lease pool. Its entry's
// value counts its permits (value.Permits; none for one permit).

var (
	_ driver.Semaphores      = (*Backend)(nil)
	_ driver.WeightedPermits = (*Backend)(nil)
)

// semBase is the internal name every key of semaphore name starts with.
func semBase(name string) string { return semPrefix + name + "\x00" }

// semPrefix starts every semaphore's internal names; permitSuffix ends the
// internal lock key of its permits.
const semPrefix, permitSuffix = "\x00sem\x00", "\x00p"

// permitKey is the internal lock key whose queue holds name's permits.
func permitKey(name string) string { return semPrefix + name + permitSuffix }

// limitKey is the store key of name's number of permits.
func (b *Backend) limitKey(name string) string { return b.prefix + b.esc(semBase(name)) + "limit" }

// permitIntentDir is the directory of the intents of the requests that
// wait for name's permits.
func (b *Backend) permitIntentDir(name string) string { return b.dir(semBase(name) + "i") }

// permitIntentKey is the store key of intent, a request's waiting for
// name's permits.
func (b *Backend) permitIntentKey(name, intent string) string {
	return b.permitIntentDir(name) + b.esc(intent)
}

// permitsOf returns the number of permits that raw, a permit entry's
// value, counts.
func permitsOf(raw []byte) int {
	v, err := decodeValue(raw)
	if err != nil {
		return 1
	}
	return max(v.Permits, 1)
}

// AcquirePermit takes a permit of req.Key: AcquirePermits of one permit,
// which waits behind the intents of the requests that wait too.
func (b *Backend) AcquirePermit(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	req.Permits = 1
	return b.AcquirePermits(ctx, req, limit)
}

// AcquirePermits takes req.Permits permits of req.Key as one hold, in one
// transaction: if the stored limit is limit (or none is stored, which
// stores it) and no intent of a waiting request is older than req.Intent's
// (none at all when req.Intent is empty or unrecorded), it puts the hold's
// entry, its count in its value, and reads the limit oldest entries of the
// semaphore; the entry holds if the counts of the entries older than it
// and its own come to at most limit. Entries only ever leave that order or
// join its tail, so the entries older than one that holds never count
// more than they did when it was granted: the holds live at any moment
// count at most limit, whatever the interleaving. Grants go in the order
// of their entries, so the fence, the entry's create revision, increases
// with every grant. A refused entry is deleted at once, so a single
// attempt leaves nothing behind.
//
// While a refused entry lives (between its put and its deletion), it
// counts its permits: an attempt then may be refused although they are
// free, never the other way round. Its deletion wakes nobody (see
// WatchPermits); a waiter refused so tries again at its next poll.
//
// An attempt with req.Intent first reads its intent's key, linearizably;
// the transaction then compares that the key is the one read and that no
// intent key under the name is older. Refused, it keeps its intent: it
// renews the intent's lease, or puts the key, after every other, on a
// lease of driver.WriteIntentTTL. Granted, it deletes the key it read, in
// a second request, which wakes the name's watchers: the next in line may
// fit now. Failing that, the intent keeps later requests out until its
// lease ends.
//
// A repeated attempt by a token whose hold this backend granted and the
// store keeps (a lock service's client sending again) renews that hold
// for req.TTL and returns its grant again, with its fence.
func (b *Backend) AcquirePermits(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	if err := b.ready(ctx); err != nil {
		return driver.Grant{}, err
	}
	n := max(req.Permits, 1)
	switch {
	case limit < 1:
		return driver.Grant{}, fmt.Errorf("%w: %d permits: want at least 1", driver.ErrInvalidOption, limit)
	case n > limit:
		return driver.Grant{}, fmt.Errorf("%w: %d permits in one hold, over the %d of the semaphore", driver.ErrInvalidOption, n, limit)
	}
	if g, again, err := b.permitAgain(ctx, req); again {
		return g, err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	key, lk, want := permitKey(req.Key), b.limitKey(req.Key), strconv.Itoa(limit)
	dir, val := b.dir(key), value{Token: req.Token, Meta: req.Meta}
	if n > 1 {
		val.Permits = n
	}
	fair, ik, intent, err := b.fairness(ctx, req.Key, req.Intent)
	if err != nil {
		return driver.Grant{}, b.fail(fmt.Errorf("read intent: %w", err))
	}
	var entry string
	t, resp, err := b.leased(ctx, req.TTL, func(id clientv3.LeaseID) (*clientv3.TxnResponse, error) {
		entry = b.entryKey(key, id)
		attempt := clientv3.OpTxn(fair,
			[]clientv3.Op{
				clientv3.OpPut(entry, val.encode(), clientv3.WithLease(id)),
				clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithLimit(int64(limit)),
					clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
			},
			[]clientv3.Op{clientv3.OpGet(b.permitIntentDir(req.Key), clientv3.WithPrefix(), clientv3.WithCountOnly())})
		return b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(lk), "=", want)).
			Then(attempt).
			Else(clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)},
				[]clientv3.Op{clientv3.OpPut(lk, want), attempt},
				[]clientv3.Op{clientv3.OpGet(lk)})).
			Commit()
	})
	if err != nil {
		return driver.Grant{}, b.fail(err)
	}
	ops := resp.Responses
	if !resp.Succeeded {
		inner := ops[0].GetResponseTxn()
		if !inner.Succeeded {
			b.leases.put(t.id, t.ttl, t.confirmed) // nothing was put on it
			return driver.Grant{}, b.limitDiffers(req.Key, inner.Responses[0].GetResponseRange().Kvs, limit)
		}
		ops = inner.Responses[1:] // the limit was stored with the attempt
	}
	at := ops[0].GetResponseTxn()
	if !at.Succeeded {
		b.leases.put(t.id, t.ttl, t.confirmed) // nothing was put on it
		return driver.Grant{}, b.permitRefused(ctx, ik, intent,
			fmt.Errorf("%w: %d requests wait", driver.ErrNotAcquired, at.Responses[0].GetResponseRange().Count))
	}
	held := 0
	dropped := []string{entry} // deleted if the attempt is refused
	for _, kv := range at.Responses[1].GetResponseRange().Kvs {
		k := string(kv.Key)
		if k != entry && !ofToken(kv.Value, req.Token) {
			held += permitsOf(kv.Value)
			continue
		}
		// The token's first entry: this attempt's, or an earlier one's
		// whose reply was lost (a lock service's call cut short), which
		// is the hold if it fits.
		if held+n > limit {
			if k != entry {
				dropped = append(dropped, k)
			}
			break
		}
		var g driver.Grant
		if k == entry {
			g = b.granted(req.Token, entry, t, resp.Header.Revision, req.TTL)
		} else if g, err = b.permitAgainAt(ctx, req, kv, entry, t); err != nil {
			return driver.Grant{}, err
		}
		if intent != nil {
			_, _ = b.cli.Delete(ctx, ik) // failing, the intent keeps later requests out until its lease ends
		}
		return g, nil
	}
	rctx, rcancel := b.request(context.WithoutCancel(ctx))
	defer rcancel()
	if err := b.deleteEntries(rctx, dropped); err != nil {
		// The entries stay until their leases expire, taking a place meanwhile.
		return driver.Grant{}, b.fail(fmt.Errorf("delete refused entry: %w", err))
	}
	b.leases.put(t.id, t.ttl, t.confirmed)
	return driver.Grant{}, b.permitRefused(rctx, ik, intent,
		fmt.Errorf("%w: %d of %d permits held or asked for first, %d wanted", driver.ErrNotAcquired, held, limit, n))
}

// ofToken reports whether the entry value raw carries token.
func ofToken(raw []byte, token string) bool {
	v, err := decodeValue(raw)
	return err == nil && v.Token == token
}

// deleteEntries deletes entries in one transaction.
func (b *Backend) deleteEntries(ctx context.Context, entries []string) error {
	ops := make([]clientv3.Op, len(entries))
	for i, e := range entries {
		ops[i] = clientv3.OpDelete(e)
	}
	_, err := b.cli.Txn(ctx).Then(ops...).Commit()
	return err
}

// permitAgainAt grants req again on kv, the entry of an earlier attempt
// of req.Token that holds permits (see grantedAgain), once the entry this
// attempt put (on ticket t) is deleted.
func (b *Backend) permitAgainAt(ctx context.Context, req driver.AcquireRequest, kv *mvccpb.KeyValue, entry string, t *ticket) (driver.Grant, error) {
	if err := b.deleteEntries(ctx, []string{entry}); err != nil {
		return driver.Grant{}, b.fail(fmt.Errorf("delete the repeat's entry: %w", err))
	}
	b.leases.put(t.id, t.ttl, t.confirmed)
	return b.grantedAgain(ctx, permitKey(req.Key), req, kv)
}

// fairness returns the compares under which an attempt with intent (or
// none, "") may be granted permits of name: no intent key under name is
// older than intent's, which it reads, linearizably, and returns with its
// key; where intent is "" or has no key (new, or expired), no intent key
// under name exists at all, since a new intent goes after every other.
func (b *Backend) fairness(ctx context.Context, name, intent string) ([]clientv3.Cmp, string, []*mvccpb.KeyValue, error) {
	dir := b.permitIntentDir(name)
	if intent == "" {
		return []clientv3.Cmp{empty(dir)}, "", nil, nil
	}
	ik := b.permitIntentKey(name, intent)
	resp, err := b.cli.Get(ctx, ik)
	if err != nil {
		return nil, "", nil, err
	}
	if len(resp.Kvs) == 0 {
		return []clientv3.Cmp{empty(dir)}, ik, nil, nil
	}
	rev := resp.Kvs[0].CreateRevision
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(ik), "=", rev),
		clientv3.Compare(clientv3.CreateRevision(dir), ">", rev-1).WithPrefix(),
	}, ik, resp.Kvs, nil
}

// permitRefused returns refused, the error of a refused attempt, once the
// attempt's intent key ik, if not "", is recorded: kvs holds it as read
// before the attempt, if it was there.
func (b *Backend) permitRefused(ctx context.Context, ik string, kvs []*mvccpb.KeyValue, refused error) error {
	if ik == "" {
		return refused
	}
	if err := b.recordIntent(ctx, ik, kvs); err != nil {
		return b.fail(fmt.Errorf("record intent: %w", err))
	}
	return refused
}

// permitAgain returns, with again set, the outcome of an attempt by a
// token whose hold of req.Key this backend granted: the hold renewed for
// req.TTL and its grant, or the renewal's failure. A hold the store no
// longer keeps is no outcome: the attempt goes on as a new one.
func (b *Backend) permitAgain(ctx context.Context, req driver.AcquireRequest) (g driver.Grant, again bool, err error) {
	key := permitKey(req.Key)
	b.mu.Lock()
	h := b.holdingOf(key, req.Token)
	b.mu.Unlock()
	if h == nil {
		return driver.Grant{}, false, nil
	}
	switch err := b.Renew(ctx, key, req.Token, req.TTL); {
	case errors.Is(err, driver.ErrNotHeld):
		return driver.Grant{}, false, nil
	case err != nil:
		return driver.Grant{}, true, err
	}
	return driver.Grant{Fence: uint64(h.rev), Lost: h.lost, Requested: h.requested}, true, nil
}

// WithdrawPermitIntent deletes intent's key, which wakes name's watchers.
// Its lease expires by itself.
func (b *Backend) WithdrawPermitIntent(ctx context.Context, name, intent string) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	if _, err := b.cli.Delete(ctx, b.permitIntentKey(name, intent)); err != nil {
		return b.fail(err)
	}
	return nil
}

// limitDiffers is the error of an attempt that expected limit permits of
// name, whose stored limit kvs holds.
func (b *Backend) limitDiffers(name string, kvs []*mvccpb.KeyValue, limit int) error {
	stored := "none"
	if len(kvs) > 0 {
		stored = string(kvs[0].Value)
	}
	return fmt.Errorf("%w: the semaphore has %s permits, not %d", driver.ErrInvalidOption, stored, limit)
}

// RenewPermit renews token's permit of name as Renew renews a lock.
func (b *Backend) RenewPermit(ctx context.Context, name, token string, ttl time.Duration) error {
	return b.Renew(ctx, permitKey(name), token, ttl)
}

// ReleasePermit deletes token's permit of name as Release deletes a lock's
// entry; the deletion wakes name's watchers.
func (b *Backend) ReleasePermit(ctx context.Context, name, token string) error {
	return b.Release(ctx, permitKey(name), token)
}

// SetPermits stores n as name's limit, which wakes name's watchers.
func (b *Backend) SetPermits(ctx context.Context, name string, n int) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("%w: %d permits: want at least 1", driver.ErrInvalidOption, n)
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	if _, err := b.cli.Put(ctx, b.limitKey(name), strconv.Itoa(n)); err != nil {
		return b.fail(err)
	}
	return nil
}

// InspectPermits returns name's stored limit and its permit entries, oldest
// first, read at one revision, each with the permits it counts. A refused
// attempt's entry shows among them for the moment it lives.
func (b *Backend) InspectPermits(ctx context.Context, name string) (int, []driver.Info, error) {
	if err := b.ready(ctx); err != nil {
		return 0, nil, err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	resp, err := b.cli.Txn(ctx).Then(
		clientv3.OpGet(b.limitKey(name)),
		clientv3.OpGet(b.dir(permitKey(name)), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
	).Commit()
	if err != nil {
		return 0, nil, b.fail(err)
	}
	limit := 0
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if limit, err = strconv.Atoi(string(kvs[0].Value)); err != nil {
			return 0, nil, fmt.Errorf("etcdlock: stored limit: %w", err)
		}
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	held, err := b.infos(ctx, holdersOf(name, kvs))
	if err != nil {
		return 0, nil, err
	}
	for i, kv := range kvs {
		held[i].Permits = permitsOf(kv.Value)
	}
	return limit, held, nil
}

// holdersOf pairs name with each of its entries kvs.
func holdersOf(name string, kvs []*mvccpb.KeyValue) []keyHolder {
	out := make([]keyHolder, len(kvs))
	for i, kv := range kvs {
		out[i] = keyHolder{name, kv}
	}
	return out
}

// WatchPermits fires when a hold of name is deleted (released, expired),
// an intent of a request waiting for name is (granted, withdrawn,
// expired), or its limit is stored. The deletion of a refused attempt's
// entry is no notice: waiters would otherwise wake each other with their
// own refusals, each refusal making the others' attempts that are refused
// in turn. Nor is a refused attempt's intent, which is put or renewed,
// never deleted.
func (b *Backend) WatchPermits(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if err := b.ready(ctx); err != nil {
		return nil, nil, err
	}
	lk, intents := b.limitKey(name), b.permitIntentDir(name)
	return b.watchPrefix(ctx, name, b.prefix+b.esc(semBase(name)), func(ctx context.Context, ev *clientv3.Event) bool {
		switch {
		case string(ev.Kv.Key) == lk:
			return true
		case ev.Type != mvccpb.DELETE:
			return false
		case strings.HasPrefix(string(ev.Kv.Key), intents):
			return true
		}
		return ev.PrevKv == nil || b.heldPermit(ctx, name, ev.PrevKv)
	}, clientv3.WithPrevKV())
}

// heldPermit reports whether prev, a permit entry of name as it was before
// its deletion, was granted: whether the entries older than it at its
// creation and it counted at most the limit's permits. A failed read (a
// compacted revision, say) counts as granted: a needless wake-up costs
// one attempt, a missed one a poll interval.
func (b *Backend) heldPermit(ctx context.Context, name string, prev *mvccpb.KeyValue) bool {
	ctx, cancel := b.request(ctx)
	defer cancel()
	rev := prev.CreateRevision
	resp, err := b.cli.Txn(ctx).Then(
		clientv3.OpGet(b.limitKey(name), clientv3.WithRev(rev)),
		clientv3.OpGet(b.dir(permitKey(name)), clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithMaxCreateRev(rev-1)),
	).Commit()
	if err != nil {
		return true
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return true
	}
	limit, err := strconv.Atoi(string(kvs[0].Value))
	if err != nil {
		return true
	}
	held := permitsOf(prev.Value)
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		held += permitsOf(kv.Value)
	}
	return held <= limit
}

// watchPrefix watches the keys under prefix, which belong to name, with
// opts, and fires wake on every event for which fires holds. It returns once the
// watch is in place, so nothing after the call is missed. A watch that
// breaks is opened again, and wake fires then, since an event may have
// been missed meanwhile. stop must be called once.
func (b *Backend) watchPrefix(ctx context.Context, name, prefix string, fires func(context.Context, *clientv3.Event) bool, opts ...clientv3.OpOption) (<-chan struct{}, func(), error) {
	if err := b.checkOpen(); err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(waitWatchContext(ctx))
	unhook := context.AfterFunc(b.closing, cancel)
	opts = append(opts, clientv3.WithPrefix())
	wch := b.cli.Watch(wctx, prefix, append(opts, clientv3.WithCreatedNotify())...)
	stop := func() { unhook(); cancel() }
	rctx, rcancel := b.request(ctx)
	defer rcancel()
	select {
	case wr, ok := <-wch:
		if !ok || wr.Err() != nil {
			stop()
			return nil, nil, b.fail(fmt.Errorf("watch: %w", errors.Join(wr.Err(), wctx.Err(), errors.New("not created"))))
		}
	case <-rctx.Done():
		stop()
		return nil, nil, b.fail(fmt.Errorf("watch: %w", rctx.Err()))
	}
	wake := make(chan struct{}, 1)
	notify := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			for wr := range wch {
				if wr.Err() != nil {
					break
				}
				if slices.ContainsFunc(wr.Events, func(ev *clientv3.Event) bool { return fires(wctx, ev) }) {
					notify()
				}
			}
			if sleep(wctx, watchRetry) != nil {
				return
			}
			notify() // the broken watch may have missed an event
			wch = b.cli.Watch(wctx, prefix, opts...)
		}
	}()
	return wake, func() { stop(); <-done }, nil
}

// watchRetry is the pause before a broken watch (compaction, a lost
// leader) is opened again.
const watchRetry = 50 * time.Millisecond
