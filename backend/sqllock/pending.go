package sqllock

import (
	"context"
	"sync"
)

// pending counts, by key, work the backend runs in the background that may
// still hold or take the key for it: places in the key's queue being given
// up (queue.go), attempts whose caller left before their statement ended
// (attempt.go). The backend's own next attempt on the key waits for it, so
// that it does not fail on what the backend itself left behind.
type pending struct {
	mu    sync.Mutex
	byKey map[string]*pendingKey
}

// pendingKey is the work pending on one key.
type pendingKey struct {
	n    int
	done chan struct{} // closed when n comes to 0
}

// start counts work on key begun; end counts it ended.
func (p *pending) start(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byKey == nil {
		p.byKey = make(map[string]*pendingKey)
	}
	k := p.byKey[key]
	if k == nil {
		k = &pendingKey{done: make(chan struct{})}
		p.byKey[key] = k
	}
	k.n++
}

func (p *pending) end(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.byKey[key]
	if k.n--; k.n == 0 {
		close(k.done)
		delete(p.byKey, key)
	}
}

// wait returns once no work on key is pending, or when ctx ends.
func (p *pending) wait(ctx context.Context, key string) {
	p.mu.Lock()
	k := p.byKey[key]
	p.mu.Unlock()
	if k == nil {
		return
	}
	select {
	case <-k.done:
	case <-ctx.Done():
	}
}
