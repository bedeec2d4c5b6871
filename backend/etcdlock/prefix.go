package etcdlock

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/keyfeed"
)

var _ driver.PrefixWatcher = (*Backend)(nil)

// maxPendingKeys bounds the keys a prefix watch keeps for a receiver that
// falls behind; past it, the receiver is told to read the prefix again.
const maxPendingKeys = 4096

// WatchPrefix reports the keys under prefix whose queue changed, from etcd's
// watch of their directories: a holder or waiter put or deleted, which a
// grant, a release, an expiry or a waiter's coming and going is. It returns
// once etcd has created the watch, so that every change after it is
// reported. A watch that breaks (a compaction, a lost leader) is resumed
// after an empty batch, which tells the receiver to read the prefix again.
func (b *Backend) WatchPrefix(ctx context.Context, prefix string) (<-chan []string, error) {
	if err := b.ready(ctx); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(b.closing, cancel)
	wch, err := b.watchCreated(wctx, prefix)
	if err != nil {
		stopOnClose()
		cancel()
		return nil, b.fail(err)
	}
	// Counted under mu, where Close marks the backend closed before it
	// waits for the count: a watch created as Close began ends here.
	b.mu.Lock()
	if b.closed.Load() {
		b.mu.Unlock()
		stopOnClose()
		cancel()
		return nil, b.checkOpen()
	}
	b.bg.Add(1)
	b.mu.Unlock()
	out := make(chan []string)
	go func() {
		defer b.bg.Done()
		defer stopOnClose()
		defer cancel()
		defer close(out)
		b.feedPrefix(wctx, prefix, wch, out)
	}()
	return out, nil
}

// watchCreated opens a watch of the directories of the keys under prefix
// and returns once etcd has created it.
func (b *Backend) watchCreated(ctx context.Context, prefix string) (clientv3.WatchChan, error) {
	wch := b.cli.Watch(clientv3.WithRequireLeader(ctx), b.prefix+b.esc(prefix), clientv3.WithPrefix(),
		clientv3.WithCreatedNotify())
	rctx, cancel := b.request(ctx)
	defer cancel()
	select {
	case wr, ok := <-wch:
		switch {
		case !ok:
			return nil, context.Cause(ctx)
		case wr.Err() != nil:
			return nil, wr.Err()
		}
		return wch, nil
	case <-rctx.Done():
		return nil, rctx.Err()
	}
}

// feedPrefix hands the keys of wch's events to out in batches until ctx
// ends, keeping what out has not taken yet, and reopens the watch when it
// breaks.
func (b *Backend) feedPrefix(ctx context.Context, prefix string, wch clientv3.WatchChan, out chan<- []string) {
	var (
		feed   = keyfeed.New(maxPendingKeys)
		retry  time.Duration
		reopen <-chan time.Time // while the watch is broken
	)
	for {
		send, batch := feed.Next(out)
		select {
		case <-ctx.Done():
			return
		case send <- batch:
			feed.Sent()
		case wr, ok := <-wch:
			if ok && wr.Err() == nil {
				for _, ev := range wr.Events {
					if k, ok := b.keyOfEntry(string(ev.Kv.Key)); ok {
						feed.Add(k)
					}
				}
				continue
			}
			if ctx.Err() != nil {
				return
			}
			wch, retry = nil, 0 // broken: reopen it, then tell the receiver
			reopen = time.After(0)
		case <-reopen:
			reopen = nil
			w, err := b.watchCreated(ctx, prefix)
			if err != nil {
				retry = keyfeed.NextRetry(retry)
				reopen = time.After(retry)
				continue
			}
			// What changed while the watch was broken is unknown.
			wch = w
			feed.Lost()
		}
	}
}

// keyOfEntry returns the lock key whose queue entry is entry, if entry is
// one.
func (b *Backend) keyOfEntry(entry string) (string, bool) {
	key, _, err := b.splitEntry(entry)
	return key, err == nil
}
