package zklock

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

// What semaphores and read-write locks share: their nodes are leased holds
// under a parent of their own, decided in single attempts, so no waiter
// sits behind a holder to time its lease as a lock's does. Instead every
// refused attempt times the leases of the nodes that refused it, on this
// host's clock, from the moment this backend first saw each node's current
// version: a node whose version stays the same for its whole TTL is
// deleted, by that version, so that a renewal in between wins. A vanished
// holder is thus freed one TTL after a waiter first saw its last version:
// about a poll after its lease by a waiter that was already trying (the
// client's waits try at least every 100 ms), a TTL after a later waiter's
// first attempt, and at the latest when its session ends.

// syncState is what a backend remembers between the single attempts of its
// semaphores and read-write locks.
type syncState struct {
	mu sync.Mutex
	// seen: parent -> child name -> the first sighting of its version.
	seen map[string]map[string]sighting
	// limits: semaphore path -> its stored limit, as last read or written.
	limits map[string]storedLimit
}

// sighting is when this backend first saw a node at a version.
type sighting struct {
	version int32
	at      time.Time
}

// maxRemembered bounds the parents whose sightings, and the semaphores
// whose limits, a backend remembers; past it, it forgets them all, which
// only delays an expiry or costs a read.
const maxRemembered = 1024

// state returns b's syncState, or ErrClosed.
func (b *Backend) state() (*syncState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, driver.ErrClosed
	}
	return b.syncMemory, nil
}

// keep forgets the sightings under parent of the children not in queue.
func (s *syncState) keep(parent string, queue []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.seen[parent]
	if len(old) == 0 {
		return
	}
	kept := make(map[string]sighting, len(queue))
	for _, c := range queue {
		if v, ok := old[c]; ok {
			kept[c] = v
		}
	}
	if len(kept) == 0 {
		delete(s.seen, parent)
		return
	}
	s.seen[parent] = kept
}

// unchangedFor returns how long the child of parent has been seen at
// version, recording the sighting if it is new.
func (s *syncState) unchangedFor(parent, child string, version int32, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	children := s.seen[parent]
	if children == nil {
		if len(s.seen) >= maxRemembered {
			clear(s.seen)
		}
		children = make(map[string]sighting)
		s.seen[parent] = children
	}
	v, ok := children[child]
	if !ok || v.version != version {
		children[child] = sighting{version: version, at: now}
		return 0
	}
	return now.Sub(v.at)
}

// expire deletes those of parent's children named that are past their
// TTL, and returns how many of them are gone, or let the attempt in: lets,
// if not nil, reports whether a node's value does whatever its lease (a
// downgraded writer's hold lets a reader in).
func (b *Backend) expire(ctx context.Context, st *syncState, parent string, names []string, lets func(value) bool) (int, error) {
	gone := 0
	for _, name := range names {
		node := parent + "/" + name
		w, err := call(ctx, b, func() (watched, error) {
			raw, stat, err := b.conn.Get(node)
			return watched{raw: raw, stat: stat}, err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			gone++
			continue
		}
		if err != nil {
			return gone, err
		}
		v, err := decodeValue(node, w.raw)
		if err != nil {
			return gone, err
		}
		if lets != nil && lets(v) {
			gone++
			continue
		}
		if st.unchangedFor(parent, name, w.stat.Version, time.Now()) < v.ttl() {
			continue
		}
		err = b.deleteNode(ctx, node, w.stat.Version)
		switch {
		case err == nil, errors.Is(err, zk.ErrNoNode):
			gone++
		case !errors.Is(err, zk.ErrBadVersion): // renewed meanwhile: still held
			return gone, err
		}
	}
	return gone, nil
}

// heldNode returns token's node under parent, and this backend's record of
// the hold if it has one. Without a record it lists parent for a node named
// for one of names (token, with its kind for a read-write lock).
func (b *Backend) heldNode(ctx context.Context, parent, token string, names ...string) (string, *hold, error) {
	b.mu.Lock()
	h := b.holds[token]
	b.mu.Unlock()
	if h != nil && path.Dir(h.path) == parent {
		return h.path, h, nil
	}
	children, err := call(ctx, b, func() ([]string, error) {
		c, _, err := b.conn.Children(parent)
		return c, err
	}, nil)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return "", nil, err
	}
	for _, name := range names {
		if c := findToken(children, name); c != "" {
			return parent + "/" + c, nil, nil
		}
	}
	return "", nil, driver.ErrNotHeld
}

// renewIn rewrites token's node under parent for ttl (see Renew). names are
// as for heldNode. It writes at the version it knows, this backend's last
// write of a hold it granted, or the one it read: a write in between (a
// downgrade, a renewal by another backend) fails it, and it reads the node
// and writes again, keeping what the node says, so that no renewal undoes a
// downgrade.
func (b *Backend) renewIn(ctx context.Context, parent, token string, ttl time.Duration, names ...string) error {
	if s := b.conn.State(); s != zk.StateHasSession {
		return fmt.Errorf("session not connected (%v)", s)
	}
	node, h, err := b.heldNode(ctx, parent, token, names...)
	if err != nil {
		return err
	}
	for range 3 {
		var data []byte
		version := int32(-1)
		if h != nil {
			b.mu.Lock()
			if h.version >= 0 {
				h.setLocked(ttl, h.shared)
				data, version = h.data, h.version
			}
			b.mu.Unlock()
		}
		if data == nil {
			v, st, err := b.readValue(ctx, node)
			if err != nil {
				return notHeld(err)
			}
			v.TTLMs = ttl.Milliseconds()
			data, version = v.encode(), st.Version
			if h != nil {
				b.mu.Lock()
				h.setLocked(ttl, v.Shared)
				b.mu.Unlock()
			}
		}
		st, err := call(ctx, b, func() (*zk.Stat, error) { return b.conn.Set(node, data, version) }, nil)
		if h != nil {
			b.wrote(h, st, err)
		}
		if !errors.Is(err, zk.ErrBadVersion) {
			return notHeld(err)
		}
	}
	return fmt.Errorf("%s kept changing", node)
}

// readValue reads node's value and stat.
func (b *Backend) readValue(ctx context.Context, node string) (value, *zk.Stat, error) {
	w, err := call(ctx, b, func() (watched, error) {
		raw, st, err := b.conn.Get(node)
		return watched{raw: raw, stat: st}, err
	}, nil)
	if err != nil {
		return value{}, nil, err
	}
	v, err := decodeValue(node, w.raw)
	return v, w.stat, err
}

// wrote records the outcome of a write of h's node: the version it left,
// or, after a failure, that the version is not known.
func (b *Backend) wrote(h *hold, st *zk.Stat, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		h.version = -1
		return
	}
	h.version = st.Version
}

// releaseIn deletes token's node under parent (see Release). names are as
// for heldNode. A parent marked for the janitor goes once empty.
func (b *Backend) releaseIn(ctx context.Context, parent, token string, janitor bool, names ...string) error {
	node, h, err := b.heldNode(ctx, parent, token, names...)
	if err != nil {
		return err
	}
	err = b.deleteNode(ctx, node, -1)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	if h != nil {
		b.mu.Lock()
		if b.holds[token] == h {
			delete(b.holds, token)
		}
		b.mu.Unlock()
		if err != nil {
			h.lose() // the node was gone: the hold had been lost, not released
		}
		h.end()
	}
	if err != nil {
		return driver.ErrNotHeld
	}
	if janitor {
		b.janitor.mark(parent)
	}
	return nil
}

// watchQueue fires wake when, from one look at a queue to the next, a node
// that counts goes, the limit changes or a writer's hold is downgraded,
// until stop is called or the backend closes. look lists the queue with
// watches (armWatches) and picks, as queueWatch.counted, the nodes whose
// going may let a waiter in: holders, intents. A refused attempt's node
// comes and goes without waking anyone, else waiters would wake each other
// for as long as the name is held; a hold that comes and goes between two
// listings wakes nobody either, which the client's poll catches. After a
// failed watch it fires once and tries again after a pause.
func (b *Backend) watchQueue(ctx context.Context, look func(context.Context) (*queueWatch, error)) (<-chan struct{}, func(), error) {
	ctx, cancel, err := b.op(ctx)
	if err != nil {
		return nil, nil, err
	}
	wake := make(chan struct{}, 1)
	fire := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		cancel()
		return nil, nil, driver.ErrClosed
	}
	b.bg.Add(1)
	b.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer b.bg.Done()
		defer close(done)
		pause := retryPause{next: 50 * time.Millisecond}
		var last *queueWatch
		for ctx.Err() == nil {
			w, err := look(ctx)
			if err != nil {
				fire()
				last = nil
				if pause.wait(ctx) != nil {
					return
				}
				continue
			}
			pause = retryPause{next: 50 * time.Millisecond}
			if last != nil && last.freed(w) {
				fire()
			}
			last = w
			select {
			case <-ctx.Done():
				return
			case <-w.chs[0]:
			case <-w.chs[1]:
			}
		}
	}()
	var once sync.Once
	return wake, func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}, nil
}

// queueWatch is one look of watchQueue: the queue, by sequence, with a
// watch on it, and the limit or a read-write lock's writer's hold, with a
// watch on its node.
type queueWatch struct {
	queue      []string
	limit      int
	downgraded string // the writer's node made a reader's, if any (rwlock.go)
	counted    []string
	chs        [2]<-chan zk.Event
}

// freed reports whether, from w to next, a counted node went, the limit
// changed or a writer's hold was downgraded.
func (w *queueWatch) freed(next *queueWatch) bool {
	if w.limit != next.limit || next.downgraded != "" && next.downgraded != w.downgraded {
		return true
	}
	for _, c := range w.counted {
		if !slices.Contains(next.queue, c) {
			return true
		}
	}
	return false
}

// armWatches lists parent's queue and reads limit (if not ""), setting a
// watch on each, or on their creation if missing.
func (b *Backend) armWatches(ctx context.Context, parent, limit string) (*queueWatch, error) {
	type look struct {
		children []string
		ch       <-chan zk.Event
	}
	l, err := call(ctx, b, func() (look, error) {
		c, _, ch, err := b.conn.ChildrenW(parent)
		if errors.Is(err, zk.ErrNoNode) {
			_, _, ch, err = b.conn.ExistsW(parent)
		}
		return look{c, ch}, err
	}, nil)
	if err != nil {
		return nil, err
	}
	w := &queueWatch{queue: sortQueue(l.children)}
	w.chs[0] = l.ch
	if limit != "" {
		got, err := call(ctx, b, func() (watched, error) {
			raw, _, ch, err := b.conn.GetW(limit)
			if errors.Is(err, zk.ErrNoNode) {
				_, _, ch, err = b.conn.ExistsW(limit)
			}
			return watched{raw: raw, ch: ch}, err
		}, nil)
		if err != nil {
			return nil, err
		}
		w.limit, _ = strconv.Atoi(string(got.raw)) // 0 if missing
		w.chs[1] = got.ch
	}
	return w, nil
}
