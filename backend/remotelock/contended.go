package remotelock

import (
	"sync"
	"time"
)

// contendedKeys remembers the keys that a try found held lately, so that a
// waiting Lock on such a key waits at once instead of first trying in a
// batch. Behind a queue of waiters every try is refused, and a flood of
// them on one key delays that key's own release in the store, where etcd
// takes one call per key per transaction.
type contendedKeys struct {
	mu   sync.Mutex
	seen map[string]time.Time // when a try last found the key held
}

// contendedFor is how long a key stays contended after a refused try, and
// maxContended how many keys are remembered: past it, all are forgotten.
const (
	contendedFor = time.Second
	maxContended = 4096
)

// mark records that a try found key held at now.
func (c *contendedKeys) mark(key string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil || len(c.seen) >= maxContended {
		c.seen = make(map[string]time.Time)
	}
	c.seen[key] = now
}

// recent reports whether a try found key held within contendedFor of now.
func (c *contendedKeys) recent(key string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.seen[key]
	return ok && now.Sub(at) < contendedFor
}
