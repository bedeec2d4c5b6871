package redislock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// trackAfter is how long a hold lives before the tracker first reads its
// key: a lock released sooner, as most are, costs no read. The read finds
// anything done to the key before it, so a hold learns of a deletion
// within trackAfter of its grant at worst, and of any later one within a
// round trip.
const trackAfter = 100 * time.Millisecond

// maxTrackBatch bounds the keys of one read.
const maxTrackBatch = 512

// trackCacheSize bounds the client-side cache of each of the client's
// connections, which holds the tracked reads: a held key's name and token.
// An entry it drops is read from Redis again at its next invalidation.
const trackCacheSize = 8 << 20

// trackedValue is a key's value as a tracked read found it.
type trackedValue struct {
	value  string
	exists bool
}

// keyTracker is implemented by a store adapter whose reads Redis can track
// (CLIENT TRACKING, Redis 6 and later over RESP3): Redis then tells the
// client, once, the next time a key it read is written, and the adapter
// passes that on to the tracker's invalidated.
type keyTracker interface {
	// readTracked reads the values of names, tracked.
	readTracked(ctx context.Context, names []string) ([]trackedValue, error)
}

// tracker tells this backend's holders, within a round trip, that a held
// key was deleted or changed behind them: a DEL, an eviction, an expiry
// they did not renew in time, a failover that lost the key, another
// client's SET. It reads each key held for trackAfter with tracking on, and
// again whenever Redis says the key was written, or that the connection
// its tracking was on broke; holders.judge compares what it read with the
// holds' tokens. The backend's own renewals and releases, and waiters
// queueing, write the key too: the read after them finds the token, or no
// hold left, and ends nothing. It costs one read per hold that outlives
// trackAfter, one per renewal, and, in Redis, an entry in the tracking
// table per key read.
type tracker struct {
	read    func(ctx context.Context, names []string) ([]trackedValue, error)
	holders *holders
	name    func(key string) string // the lock's Redis name
	timeout time.Duration           // of one read

	mu     sync.Mutex
	byName map[string]string    // followed keys, by Redis name
	due    map[string]time.Time // keys to read, and from when
	kick   chan struct{}
	closed bool
	done   chan struct{}
}

// newTracker returns a tracker that start will set going.
func newTracker() *tracker {
	return &tracker{byName: map[string]string{}, due: map[string]time.Time{}, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// start sets the tracker going, reading with read, until closing ends.
func (t *tracker) start(read func(context.Context, []string) ([]trackedValue, error), h *holders, name func(string) string, timeout time.Duration, closing context.Context) {
	t.mu.Lock()
	t.read, t.holders, t.name, t.timeout = read, h, name, timeout
	t.mu.Unlock()
	go t.run(closing)
}

// follow has key, just granted, read once it has been held for
// trackAfter.
func (t *tracker) follow(key string) {
	t.schedule(key, time.Now().Add(trackAfter))
}

// schedule has key read at when, or sooner if it is due sooner already.
func (t *tracker) schedule(key string, when time.Time) {
	t.mu.Lock()
	if t.closed || t.name == nil {
		t.mu.Unlock()
		return
	}
	if at, ok := t.due[key]; !ok || when.Before(at) {
		t.due[key] = when
	}
	t.byName[t.name(key)] = key
	t.mu.Unlock()
	t.wake()
}

// invalidated takes what Redis said was written: the Redis names of keys,
// or nil when tracking was lost (a broken connection, a flush) and every
// followed key must be read again. It runs on the client's reader and
// does not block.
func (t *tracker) invalidated(names []string, all bool) {
	now := time.Now()
	t.mu.Lock()
	if all {
		for _, key := range t.byName {
			t.due[key] = now
		}
	}
	for _, n := range names {
		if key, ok := t.byName[n]; ok {
			t.due[key] = now
		}
	}
	t.mu.Unlock()
	t.wake()
}

// invalidatedMessages is invalidated for rueidis's OnInvalidations, whose
// nil means that tracking was lost.
func (t *tracker) invalidatedMessages(ms []rueidis.RedisMessage) {
	names := make([]string, 0, len(ms))
	for _, m := range ms {
		if n, err := m.ToString(); err == nil {
			names = append(names, n)
		}
	}
	t.invalidated(names, ms == nil)
}

func (t *tracker) wake() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// run reads the keys as they fall due, until closing ends.
func (t *tracker) run(closing context.Context) {
	defer close(t.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	retry := backoff{min: 10 * time.Millisecond, max: time.Second}
	for {
		keys, next := t.ready(time.Now())
		if len(keys) > 0 {
			if t.readAndJudge(closing, keys) {
				retry = backoff{min: 10 * time.Millisecond, max: time.Second}
				continue
			}
			next = time.Now().Add(retry.next()) // the store failed: read again later
			t.reschedule(keys, next)
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-closing.Done():
			t.mu.Lock()
			t.closed = true
			t.mu.Unlock()
			return
		case <-t.kick:
		case <-timer.C:
		}
	}
}

// ready takes the keys due by now that are still held, at most
// maxTrackBatch, and returns when the next of the others falls due. Keys
// no longer held stop being followed.
func (t *tracker) ready(now time.Time) (keys []string, next time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, at := range t.due {
		if at.After(now) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		if len(keys) == maxTrackBatch {
			next = now
			continue
		}
		delete(t.due, key)
		if !t.holders.holds(key) {
			delete(t.byName, t.name(key))
			continue
		}
		keys = append(keys, key)
	}
	return keys, next
}

// reschedule has keys read again at when.
func (t *tracker) reschedule(keys []string, when time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, key := range keys {
		if _, ok := t.due[key]; !ok {
			t.due[key] = when
		}
	}
}

// readAndJudge reads keys, tracked, and has holders judge what it found.
// It reports false if the read failed.
func (t *tracker) readAndJudge(closing context.Context, keys []string) bool {
	names := make([]string, len(keys))
	for i, key := range keys {
		names[i] = t.name(key)
	}
	recorded := t.holders.recorded() // before the read is sent
	ctx, cancel := context.WithTimeout(closing, t.timeout)
	defer cancel()
	values, err := t.read(ctx, names)
	if err != nil {
		return false
	}
	for i, v := range values {
		t.holders.judge(keys[i], v.value, v.exists, recorded)
	}
	return true
}

// wait returns once the tracker has stopped, if it was started.
func (t *tracker) wait() {
	t.mu.Lock()
	started := t.name != nil
	t.mu.Unlock()
	if started {
		<-t.done
	}
}
