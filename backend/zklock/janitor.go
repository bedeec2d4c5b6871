package zklock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// janitor deletes parents that were left empty by a release or an abandoned
// wait. It waits a little first, so that a key locked over and over keeps its
// parent instead of deleting and creating it each time; parents are created
// as containers, which the server also removes when empty, should a janitor
// never get to them.
type janitor struct {
	b    *Backend
	quit chan struct{}
	done chan struct{}

	mu      sync.Mutex
	pending map[string]time.Time // parent -> when it may be empty
}

// janitorDelay is how long a parent may stay empty before it is deleted.
const janitorDelay = 500 * time.Millisecond

func newJanitor(b *Backend) *janitor {
	return &janitor{b: b, quit: make(chan struct{}), done: make(chan struct{}), pending: make(map[string]time.Time)}
}

// mark notes that parent may have just become empty.
func (j *janitor) mark(parent string) {
	j.mu.Lock()
	j.pending[parent] = time.Now()
	j.mu.Unlock()
}

func (j *janitor) run() {
	defer close(j.done)
	t := time.NewTicker(janitorDelay)
	defer t.Stop()
	for {
		select {
		case <-j.quit:
			j.sweep(time.Now().Add(janitorDelay))
			return
		case now := <-t.C:
			j.sweep(now)
		}
	}
}

// stop sweeps what is pending and returns once the janitor is done.
func (j *janitor) stop() {
	close(j.quit)
	<-j.done
}

// sweep deletes the parents marked at least janitorDelay before now. A
// parent that has children again stays (ErrNotEmpty), one already gone is
// fine (ErrNoNode).
func (j *janitor) sweep(now time.Time) {
	j.mu.Lock()
	var due []string
	for p, at := range j.pending {
		if now.Sub(at) >= janitorDelay {
			due = append(due, p)
			delete(j.pending, p)
		}
	}
	j.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, p := range due {
		err := j.b.deleteNode(ctx, p, -1)
		if err != nil && !errors.Is(err, zk.ErrNotEmpty) && !errors.Is(err, zk.ErrNoNode) {
			return // the store is unreachable; the container mode covers it
		}
	}
}
