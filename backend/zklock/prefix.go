package zklock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/keyfeed"
)

var _ driver.PrefixWatcher = (*Backend)(nil)

// maxPendingKeys bounds the keys a prefix watch keeps for a receiver that
// falls behind; past it, the receiver is told to read the prefix again.
const maxPendingKeys = 4096

// minRootReadGap is the least time between two reads of the root's
// children by one prefix watch: the root names every key of every prefix,
// and ZooKeeper reads it whole.
const minRootReadGap = 50 * time.Millisecond

// WatchPrefix reports the keys under prefix whose queue changed, from
// ZooKeeper's watches: a watch of the root's children tells of a key's
// parent created or deleted (its first waiter, its last release), and a
// watch of each parent's children of a holder or waiter node created or
// deleted, which a grant, a release, an expiry (the session's end, or the
// waiter behind deleting a lapsed holder) and a waiter's coming and going
// are. ZooKeeper's watches fire once: each is set again with the read of
// what fired it, so an idle prefix costs no reads, and a changed key one
// read of its parent's children. The root is read whole (ZooKeeper has no
// paging), at most once per 50 ms per watch; a key whose parent is created
// and deleted within that gap is reported once the root is read, or not at
// all. Once the session ends, the receiver is told to read the prefix again
// (an empty batch) and the watches are set again on the new session.
func (b *Backend) WatchPrefix(ctx context.Context, prefix string) (<-chan []string, error) {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return nil, err
	}
	w := &prefixWatch{b: b, prefix: prefix, fired: make(chan fired), parents: make(map[string]string), armed: make(map[string]uint64)}
	if err := w.watchAll(ctx); err != nil {
		stop()
		return nil, driver.Wrap("zklock", err)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		stop()
		return nil, driver.ErrClosed
	}
	b.bg.Add(1)
	b.mu.Unlock()
	out := make(chan []string)
	go func() {
		defer b.bg.Done()
		defer stop()
		defer close(out)
		w.feed(ctx, out)
	}()
	return out, nil
}

// prefixWatch is one WatchPrefix. The goroutine of each watch set waits for
// it to fire and hands the event to feed. Only the goroutine of feed (or
// WatchPrefix, before it starts) changes its maps.
type prefixWatch struct {
	b       *Backend
	prefix  string
	fired   chan fired
	parents map[string]string // the watched parents' node names, by key
	// The last watch set on each node name ("": the root), by number: a
	// watch set again while an earlier one still waits (after a failed
	// read) fires twice, and only the last counts.
	armed map[string]uint64
	set   uint64 // watches set so far
}

// fired is a watch's event: of the root's children if name is "", else of
// the children of the parent name; set numbers the watch.
type fired struct {
	name string
	set  uint64
	ev   zk.Event
}

// watchAll reads the root's children and each watched parent's, setting
// their watches.
func (w *prefixWatch) watchAll(ctx context.Context) error {
	clear(w.parents)
	clear(w.armed)
	names, err := w.watchChildren(ctx, "")
	if err != nil {
		return err
	}
	for _, name := range names {
		if key, ok := keyOf(name); ok && strings.HasPrefix(key, w.prefix) {
			if _, err := w.watchChildren(ctx, name); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
			w.parents[key] = name
		}
	}
	return nil
}

// watchChildren reads the children of the root ("") or of the parent name,
// with a watch whose event goes to w.fired. A root that does not exist yet
// (no lock was ever taken under it) is watched for its creation.
func (w *prefixWatch) watchChildren(ctx context.Context, name string) ([]string, error) {
	path := w.b.root
	if name != "" {
		path += "/" + name
	}
	type read struct {
		children []string
		ch       <-chan zk.Event
	}
	r, err := call(ctx, w.b, func() (read, error) {
		for {
			c, _, ch, err := w.b.conn.ChildrenW(path)
			if !errors.Is(err, zk.ErrNoNode) || name != "" {
				return read{c, ch}, err
			}
			exists, _, ch, err := w.b.conn.ExistsW(path)
			if err != nil || !exists {
				return read{nil, ch}, err
			}
			// Created meanwhile: read its children after all.
		}
	}, nil)
	if err != nil {
		return nil, err
	}
	w.set++
	w.armed[name] = w.set
	f := fired{name: name, set: w.set}
	go func() {
		select {
		case f.ev = <-r.ch:
			select {
			case w.fired <- f:
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
	}()
	return r.children, nil
}

// feed hands the keys of the watches' events to out in batches until ctx
// ends.
func (w *prefixWatch) feed(ctx context.Context, out chan<- []string) {
	feed := keyfeed.New(maxPendingKeys)
	var (
		rootRead  time.Time
		readRoot  <-chan time.Time // a root read is due
		retry     time.Duration
		rewatch   <-chan time.Time // every watch must be set again
		rootFired bool
	)
	for {
		send, batch := feed.Next(out)
		select {
		case <-ctx.Done():
			return
		case send <- batch:
			feed.Sent()
		case f := <-w.fired:
			switch {
			case f.set != w.armed[f.name]:
				// An earlier watch of a node watched again since.
			case f.ev.Type == zk.EventNotWatching || f.ev.Err != nil:
				// The session ended: the watches are gone.
				feed.Lost()
				rewatch, readRoot, retry = time.After(0), nil, 0
			case f.name == "":
				rootFired = true
				readRoot = time.After(time.Until(rootRead.Add(minRootReadGap)))
			default:
				key, _ := keyOf(f.name)
				feed.Add(key)
				if f.ev.Type == zk.EventNodeDeleted {
					w.forget(key)
					continue
				}
				if _, err := w.watchChildren(ctx, f.name); errors.Is(err, zk.ErrNoNode) {
					w.forget(key)
				} else if err != nil {
					feed.Lost()
					rewatch = time.After(0)
				}
			}
		case <-readRoot:
			readRoot, rootRead = nil, time.Now()
			if rootFired {
				rootFired = false
				if err := w.readRoot(ctx, feed); err != nil {
					feed.Lost()
					rewatch = time.After(0)
				}
			}
		case <-rewatch:
			rewatch = nil
			if err := w.watchAll(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				retry = keyfeed.NextRetry(retry)
				rewatch = time.After(retry)
				continue
			}
			feed.Lost() // what changed while nothing watched is unknown
		}
	}
}

// readRoot reads the root's children again, setting its watch, and
// watches the parents under the prefix that are new, reporting their keys
// and those of the parents gone.
func (w *prefixWatch) readRoot(ctx context.Context, feed *keyfeed.Feed) error {
	names, err := w.watchChildren(ctx, "")
	if err != nil {
		return err
	}
	now := make(map[string]string)
	for _, name := range names {
		if key, ok := keyOf(name); ok && strings.HasPrefix(key, w.prefix) {
			now[key] = name
		}
	}
	for key := range w.parents {
		if _, ok := now[key]; !ok {
			feed.Add(key)
			w.forget(key)
		}
	}
	for key, name := range now {
		if _, ok := w.parents[key]; ok {
			continue
		}
		feed.Add(key)
		if _, err := w.watchChildren(ctx, name); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		w.parents[key] = name
	}
	return nil
}

// forget stops counting key's parent as watched: it was deleted.
func (w *prefixWatch) forget(key string) {
	delete(w.armed, w.parents[key])
	delete(w.parents, key)
}
