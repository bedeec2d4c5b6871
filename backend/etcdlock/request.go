package etcdlock

import (
	"context"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

var _ driver.ReleaseRequester = (*Backend)(nil)

// Requests to release live outside the namespace, under PREFIX.requests/
// (the namespace without its trailing slash, then ".requests/"): the
// request to the holder entry PREFIX/E is PREFIX.requests/E, on the holder's
// lease, so that it ends with the hold, and its value is "<token> <reason>".
// Each backend that holds a lock follows the whole of PREFIX.requests/ with
// one watch, opened at its first grant: requests are rare, and a watch that
// sees none costs etcd nothing.
func (b *Backend) requestsPrefix() string { return strings.TrimSuffix(b.prefix, "/") + ".requests/" }

// maxUnclaimed bounds the requests a backend keeps for entries it has not
// yet been granted: a waiter first in its queue that the store counts as
// holder before its backend has seen the grant.
const maxUnclaimed = 1024

// RequestRelease writes a request to key's holder entry, in a transaction
// that checks the entry is still the holder it read (by create revision),
// on the entry's lease, and returns what the store knows of the hold. The
// holder's backend sees it through its watch of the requests. A free key
// gets an error matching driver.ErrNotHeld and nothing is written.
func (b *Backend) RequestRelease(ctx context.Context, key, reason string) (driver.Info, error) {
	if err := b.ready(ctx); err != nil {
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
			return driver.Info{}, driver.ErrNotHeld
		}
		v, err := decodeValue(kv.Value)
		if err != nil {
			return driver.Info{}, err
		}
		entry := string(kv.Key)
		resp, err := b.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(entry), "=", kv.CreateRevision)).
			Then(clientv3.OpPut(b.requestsPrefix()+strings.TrimPrefix(entry, b.prefix), v.Token+" "+reason,
				clientv3.WithLease(clientv3.LeaseID(kv.Lease)))).
			Commit()
		if err != nil {
			return driver.Info{}, b.fail(err)
		}
		if resp.Succeeded {
			return b.info(ctx, key, kv)
		}
		// That holder released meanwhile: ask the next one, within ctx.
	}
}

// followRequestsLocked starts the backend's watch of requests to release, once.
// b.mu must be held.
func (b *Backend) followRequestsLocked() {
	if b.requests != nil {
		return
	}
	b.requests = make(map[string]string)
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		b.readRequests(b.closing)
	}()
}

// readRequests reads the requests to release under the requests prefix and
// then follows them until ctx ends, reading them all again when the watch
// breaks.
func (b *Backend) readRequests(ctx context.Context) {
	prefix := b.requestsPrefix()
	for retry := time.Duration(0); ; retry = min(max(2*retry, 50*time.Millisecond), 2*time.Second) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
		// At most maxUnclaimed live requests, in one bounded read: in a
		// namespace with more at once than that, the holders of the rest
		// are not told of them.
		resp, err := b.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(maxUnclaimed))
		if err != nil {
			continue
		}
		for _, kv := range resp.Kvs {
			b.requested(strings.TrimPrefix(string(kv.Key), prefix), string(kv.Value))
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(holdWatchContext))
		stop := context.AfterFunc(ctx, cancel)
		for wr := range b.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.Err() != nil {
				break
			}
			retry = 0
			for _, ev := range wr.Events {
				name := strings.TrimPrefix(string(ev.Kv.Key), prefix)
				if ev.Type == mvccpb.PUT {
					b.requested(name, string(ev.Kv.Value))
				} else {
					b.mu.Lock()
					delete(b.requests, name)
					b.mu.Unlock()
				}
			}
		}
		stop()
		cancel()
	}
}

// requested tells the hold of the entry PREFIX/name a request, "<token>
// <reason>", or keeps it for a grant of that entry that has not come yet.
func (b *Backend) requested(name, notice string) {
	token, reason, ok := strings.Cut(notice, " ")
	if !ok {
		return
	}
	entry := b.prefix + name
	b.mu.Lock()
	h := b.held[holdID{dir: entryDir(entry), token: token}]
	if h == nil || h.entry != entry {
		if len(b.requests) >= maxUnclaimed {
			for k := range b.requests {
				delete(b.requests, k)
				break
			}
		}
		b.requests[name] = notice
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	h.ask(&driver.ReleaseRequest{Reason: reason})
}

// claimRequestLocked tells h a request that came before its grant, if
// one did. b.mu must be held.
func (b *Backend) claimRequestLocked(h *holding, token string) {
	name := strings.TrimPrefix(h.entry, b.prefix)
	notice, ok := b.requests[name]
	if !ok {
		return
	}
	delete(b.requests, name)
	if t, reason, _ := strings.Cut(notice, " "); t == token {
		h.ask(&driver.ReleaseRequest{Reason: reason})
	}
}
