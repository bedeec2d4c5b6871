package etcdlock

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/distlock/distlock/driver"
)

// List returns the holders of the keys that start with prefix, sorted by key.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	return b.list(ctx, prefix, "", -1)
}

// ListPage returns, sorted by key, at most limit holders of the keys that
// start with prefix and sort after after, and asks for the leases of the
// page's holders only: a lease's TTL is one request per holder. In a
// namespace of the ordered layout it reads the page's range of the store,
// about two keys per lock key (its holder and its queue's tail key) and
// the entries of its waiters; in one of the escaped layout, whose names do
// not keep the keys' order, it reads the prefix's entries as List does.
func (b *Backend) ListPage(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit %d, want at least 1", driver.ErrInvalidOption, limit)
	}
	return b.list(ctx, prefix, after, limit)
}

// list returns the holders of the keys that start with prefix and sort
// after after, sorted by key: at most limit of them unless limit is -1.
func (b *Backend) list(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := b.request(ctx)
	defer cancel()
	var held []keyHolder
	var err error
	if limit >= 0 && b.keys() == orderedLayout {
		held, err = b.pageHolders(ctx, prefix, after, limit)
	} else {
		held, err = b.holders(ctx, prefix)
		held = slices.DeleteFunc(held, func(h keyHolder) bool { return h.key <= after })
		slices.SortFunc(held, func(x, y keyHolder) int { return strings.Compare(x.key, y.key) })
		if limit >= 0 && len(held) > limit {
			held = held[:limit]
		}
	}
	if err != nil {
		return nil, b.fail(err)
	}
	return b.infos(ctx, held)
}

// infos returns what the store knows of each holder, asking for up to
// leaseLookups of their leases at once.
func (b *Backend) infos(ctx context.Context, held []keyHolder) ([]driver.Info, error) {
	const leaseLookups = 16
	out := make([]driver.Info, len(held))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(leaseLookups)
	for i, h := range held {
		g.Go(func() error {
			info, err := b.info(gctx, h.key, h.kv)
			if err != nil {
				return fmt.Errorf("%q: %w", h.key, err) // a key under the prefix, which the caller names
			}
			out[i] = info
			return nil
		})
	}
	return out, g.Wait()
}

// lowestKey sorts before every valid lock key (driver.ValidateKey refuses
// control characters), and after the internal names of semaphores and
// read-write locks, which start with a NUL byte.
const lowestKey = " "

// pageHolders reads, in the ordered layout, the holders of the first limit
// lock keys that start with prefix and sort after after. It reads ranges of
// the store in key order, from the first name after after's directory, of
// about two store keys per lock key wanted. The last lock key of a range
// may have more entries past it, so its holder is read from its directory
// on its own (a read of its whole queue), and the next range starts after it.
func (b *Backend) pageHolders(ctx context.Context, prefix, after string, limit int) ([]keyHolder, error) {
	l := b.keys()
	from := b.prefix + l.escape(max(prefix, lowestKey))
	end := clientv3.GetPrefixRangeEnd(b.prefix + l.escape(prefix))
	if past := b.prefix + l.escape(after) + string(l.sep+1); after != "" && past > from {
		from = past // after's directory ends before l.sep+1, every later key's name after it
	}
	var out []keyHolder
	for len(out) < limit && from < end {
		resp, err := b.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(int64(2*(limit-len(out))+2)))
		if err != nil || len(resp.Kvs) == 0 {
			return out, err
		}
		last := string(resp.Kvs[len(resp.Kvs)-1].Key)
		cut := "" // a lock key whose entries may go on past this read
		if k, _, err := b.splitEntry(last); err == nil && resp.More && driver.ValidateKey(k) == nil {
			cut = k
		}
		byKey := make(map[string]int) // index in out
		for _, kv := range resp.Kvs {
			key, _, err := b.splitEntry(string(kv.Key))
			if err != nil || key == cut || driver.ValidateKey(key) != nil {
				continue // not a lock entry (a tail key, a semaphore's), or one of the cut key
			}
			if i, ok := byKey[key]; ok {
				if kv.CreateRevision < out[i].kv.CreateRevision {
					out[i].kv = kv
				}
				continue
			}
			byKey[key] = len(out)
			out = append(out, keyHolder{key, kv})
		}
		switch {
		case cut != "":
			kv, err := b.firstEntry(ctx, cut)
			if err != nil {
				return nil, err
			}
			if kv != nil {
				out = append(out, keyHolder{cut, kv})
			}
			from = b.prefix + l.escape(cut) + string(l.sep+1)
		case resp.More:
			from = last + "\x00"
		default:
			from = end
		}
	}
	return out[:min(len(out), limit)], nil
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
	resp, err := b.cli.Get(ctx, b.prefix+b.esc(prefix), clientv3.WithPrefix(),
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
