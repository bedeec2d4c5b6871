package redislock

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

var _ driver.Notifier = (*Backend)(nil)

// Watch returns a channel that fires when key is released through a
// backend built WithWatchedReleases (by any client), or force released, or
// released to a waiter queued for it: the watch enters itself in the key's
// watchers, which those scripts notify on the watching backend's channel,
// as WatchPermits does for a semaphore. A key whose holder's lease ran out
// frees no notice: the caller's poll finds it. The channel also fires when
// the subscription is confirmed or lost, since a notice may have been
// missed. stop must be called once.
//
// distlock's client does not need it for this backend, whose waiters queue
// in Redis (AcquireWait); it serves callers that poll a key, such as Redlock
// over several nodes, which cannot queue on any one of them.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return b.watchKeys(ctx, key, b.keysFor(key).watchers)
}

// watchKeys is Watch, WatchPermits and WatchRW: it enters a watcher of
// name in watchers, the sorted set (watchers.lua) that the scripts freeing
// name wake.
func (b *Backend) watchKeys(ctx context.Context, name, watchers string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateKey(name); err != nil {
		return nil, nil, driver.Wrap("redislock", err)
	}
	if !b.enterWait() {
		return nil, nil, driver.ErrClosed
	}
	var id [8]byte
	_, _ = crand.Read(id[:]) // crypto/rand.Read never fails
	token := "watch-" + hex.EncodeToString(id[:])
	// Each watch has a line of its own in the inbox, under a name that no
	// lock key can have (control characters are refused).
	mb, err := b.inbox.join("\x00watch\x00"+token, nextWaiter{token: token})
	if err != nil {
		b.waits.Done()
		return nil, nil, driver.Wrap("redislock", err)
	}
	w := &watcher{b: b, watchers: watchers, member: b.id + "|" + token, mb: mb}
	if err := w.enter(ctx); err != nil {
		b.inbox.leave(mb, false)
		b.waits.Done()
		return nil, nil, driver.Wrap("redislock", err)
	}
	b.inbox.listen(ctx)
	wctx, cancel := context.WithCancel(ctx)
	stopClose := context.AfterFunc(b.closing, cancel)
	go func() {
		defer b.waits.Done()
		defer stopClose()
		w.keep(wctx)
	}()
	var once sync.Once
	return mb.wake, func() { once.Do(cancel) }, nil
}

// watcher is one watch: its entry in a watchers set, and its mailbox.
type watcher struct {
	b        *Backend
	watchers string
	member   string
	mb       *mailbox
}

// enter enters or refreshes the watcher's entry for the waiter timeout.
func (w *watcher) enter(ctx context.Context) error {
	_, err := w.b.evalStrings(ctx, scriptWatch, []string{w.watchers}, w.member, millis(w.b.waiterTimeout))
	return err
}

// keep refreshes the entry until ctx ends, and subscribes again if the
// subscription was lost; then it takes the entry out, within the request
// timeout even while Close waits for it, and closes the mailbox.
func (w *watcher) keep(ctx context.Context) {
	defer w.b.inbox.leave(w.mb, false)
	for {
		t := time.NewTimer(w.b.refresh())
		select {
		case <-ctx.Done():
			t.Stop()
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.b.timeout)
			defer cancel()
			_ = w.b.runClosing(lctx, func(ctx context.Context) error {
				_, err := w.b.st.evalStrings(ctx, scriptWatch, []string{w.watchers}, w.member, "0")
				return err // a stale entry expires with the waiter timeout
			})
			return
		case <-t.C:
		}
		_ = w.enter(ctx) // a failed refresh: the next one, or the poll, makes up for it
		w.b.inbox.listen(ctx)
	}
}
