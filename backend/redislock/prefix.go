package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/keyfeed"
)

var _ driver.PrefixWatcher = (*Backend)(nil)

// prefixTracker is implemented by a store adapter that can have Redis tell
// it of every write of a key whose name begins with a prefix (CLIENT
// TRACKING ON BCAST PREFIX, Redis 6 and later over RESP3).
type prefixTracker interface {
	// trackPrefix tracks the names beginning with prefix on a connection of
	// its own to every master, and returns once every master tracks. It
	// hands changed the names Redis says were written (a name once per
	// write, and nil when Redis asked to drop every tracked name). broken
	// closes once a connection broke: changes may since have been missed.
	// stop closes the connections; changed is not called after it returns.
	trackPrefix(ctx context.Context, prefix string, changed func(names []string)) (broken <-chan struct{}, stop func(), err error)
}

// maxPendingKeys bounds the keys a prefix watch keeps for a receiver that
// falls behind; past it, the receiver is told to read the prefix again.
const maxPendingKeys = 4096

// WatchPrefix reports the keys under prefix whose lock may have changed,
// from Redis's own notices: every master tracks the Redis names of those
// keys for the watch in broadcast mode (CLIENT TRACKING ON BCAST PREFIX),
// so that a grant, a release, an expiry, an eviction, a waiter queueing or
// leaving, and also a renewal, which rewrites the key's time to live, name
// the key. A watch costs Redis a prefix in its tracking table and no reads:
// an idle prefix sends nothing. A connection that breaks (a failover, a
// restart) is opened again after an empty batch, which tells the receiver
// to read the prefix again. It needs the rueidis client (Open, NewRueidis)
// and Redis 6 or later; otherwise it returns an error matching
// errors.ErrUnsupported.
func (b *Backend) WatchPrefix(ctx context.Context, prefix string) (<-chan []string, error) {
	pt, ok := b.st.(prefixTracker)
	if !ok {
		return nil, fmt.Errorf("redislock: watching a prefix needs the rueidis client (Open or NewRueidis): %w", errors.ErrUnsupported)
	}
	if !b.enterWait() {
		return nil, driver.ErrClosed
	}
	w := &prefixWatch{b: b, pt: pt, names: b.prefix + "{" + escapeKey(prefix), kick: make(chan struct{}, 1)}
	wctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(b.closing, cancel)
	broken, stop, err := w.open(wctx)
	if err != nil {
		stopOnClose()
		cancel()
		b.waits.Done()
		return nil, err
	}
	out := make(chan []string)
	go func() {
		defer b.waits.Done()
		defer stopOnClose()
		defer cancel()
		defer close(out)
		w.feed(wctx, broken, stop, out)
	}()
	return out, nil
}

// prefixWatch is one WatchPrefix: what Redis names arrives on the
// connections' readers, which must not block, and waits in names until the
// feed takes it.
type prefixWatch struct {
	b     *Backend
	pt    prefixTracker
	names string // the Redis names of the prefix's keys begin with it

	mu      sync.Mutex
	changed []string // Redis names written since the feed last looked
	lost    bool     // Redis dropped every tracked name, or too many piled up
	kick    chan struct{}
}

// open has every master track the prefix's names, within the request
// timeout.
func (w *prefixWatch) open(ctx context.Context) (<-chan struct{}, func(), error) {
	rctx, cancel := context.WithTimeout(ctx, w.b.timeout)
	defer cancel()
	var broken <-chan struct{}
	var stop func()
	err := w.b.runClosing(rctx, func(ctx context.Context) (err error) {
		broken, stop, err = w.pt.trackPrefix(ctx, w.names, w.written)
		return err
	})
	if err != nil {
		return nil, nil, driver.Wrap("redislock", err)
	}
	return broken, stop, nil
}

// written takes what a connection's reader says was written.
func (w *prefixWatch) written(names []string) {
	w.mu.Lock()
	if names == nil || len(w.changed)+len(names) > maxPendingKeys {
		w.changed, w.lost = nil, true
	} else if !w.lost {
		w.changed = append(w.changed, names...)
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// feed hands the keys of what Redis names to out in batches until ctx
// ends, and tracks anew when a connection breaks.
func (w *prefixWatch) feed(ctx context.Context, broken <-chan struct{}, stop func(), out chan<- []string) {
	defer func() { stop() }()
	feed := keyfeed.New(maxPendingKeys)
	var retry time.Duration
	var reopen <-chan time.Time // while tracking is broken
	for {
		send, batch := feed.Next(out)
		select {
		case <-ctx.Done():
			return
		case send <- batch:
			feed.Sent()
		case <-w.kick:
			w.mu.Lock()
			names, lost := w.changed, w.lost
			w.changed, w.lost = nil, false
			w.mu.Unlock()
			if lost {
				feed.Lost()
			}
			for _, n := range names {
				if k, ok := w.keyOf(n); ok {
					feed.Add(k)
				}
			}
		case <-broken:
			stop()
			broken, stop, retry = nil, func() {}, 0
			reopen = time.After(0)
		case <-reopen:
			reopen = nil
			b, s, err := w.open(ctx)
			if err != nil {
				retry = keyfeed.NextRetry(retry)
				reopen = time.After(retry)
				continue
			}
			// What changed while nothing tracked is unknown.
			broken, stop = b, s
			feed.Lost()
		}
	}
}

// keyOf returns the lock key of a Redis name under the watched prefix: the
// lock's own name, or a companion's (":fence", ":meta", a queue, ...).
func (w *prefixWatch) keyOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, w.b.prefix+"{")
	if !ok {
		return "", false
	}
	escaped, _, ok := strings.Cut(rest, "}")
	if !ok {
		return "", false
	}
	return unescapeKey(escaped), true
}
