package server

import (
	"sync"
	"time"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// change is a lock event this server caused (a grant, a release, a forced
// release), told to its own Watch streams at once instead of at their next
// poll.
type change struct {
	typ distlockv1.Event_Type
	// info is the lock: its store key, and for a grant or a forced release
	// its fence and metadata. A release knows only the key (fence 0).
	info distlock.Info
	// token is the hold's token, for a grant or a release by token: a
	// release that reaches a stream after the key's next grant (to a
	// waiter) is told apart from a release of that grant by it.
	token  string
	at     time.Time
	reason string // a request to release's
}

// subBuffer is how many changes a slow stream may have pending; beyond it
// changes are dropped, and the stream's next poll reports them instead.
const subBuffer = 256

// broadcaster hands each change to the streams watching its tenant.
type broadcaster struct {
	mu   sync.Mutex
	subs map[*subscription]struct{}
}

// subscription is one stream's feed of changes of one tenant.
type subscription struct {
	tenant string
	ch     chan change
}

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: make(map[*subscription]struct{})}
}

// subscribe starts a feed of tenant's changes; end it with unsubscribe.
func (b *broadcaster) subscribe(tenant string) *subscription {
	sub := &subscription{tenant: tenant, ch: make(chan change, subBuffer)}
	b.mu.Lock()
	b.subs[sub] = struct{}{}
	b.mu.Unlock()
	return sub
}

func (b *broadcaster) unsubscribe(sub *subscription) {
	b.mu.Lock()
	delete(b.subs, sub)
	b.mu.Unlock()
}

// publish tells every feed of tenant about c, without ever blocking.
func (b *broadcaster) publish(tenant string, c change) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for sub := range b.subs {
		if sub.tenant != tenant {
			continue
		}
		select {
		case sub.ch <- c:
		default:
		}
	}
}
