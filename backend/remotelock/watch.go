package remotelock

import (
	"sync"
	"time"

	"connectrpc.com/connect"

	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// lossWatch follows one Watch stream of the tenant's keys, from the first
// grant to Close, and ends the Lost context of a grant that the stream
// reports expired or force-released, and the Requested context of one it
// reports asked to release. Events missed while the stream is
// re-established are not replayed: the lock's next renewal finds the loss.
type lossWatch struct {
	b       *Backend
	once    sync.Once
	started bool          // set by once, before any call of wait can run
	done    chan struct{} // closed when run returns

	mu      sync.Mutex
	byFence map[keyFence]lockID
}

type keyFence struct {
	key   string
	fence uint64
}

func newLossWatch(b *Backend) *lossWatch {
	return &lossWatch{b: b, done: make(chan struct{}), byFence: make(map[keyFence]lockID)}
}

// follow starts the stream if it is not running and watches the grant of
// key with fence for id. It is called within a call of the backend, so
// before Close waits for the stream.
func (w *lossWatch) follow(key string, fence uint64, id lockID) {
	w.mu.Lock()
	w.byFence[keyFence{key, fence}] = id
	w.mu.Unlock()
	w.once.Do(func() {
		w.started = true
		go w.run()
	})
}

// forget stops watching the grant of key with fence.
func (w *lossWatch) forget(key string, fence uint64) {
	w.mu.Lock()
	delete(w.byFence, keyFence{key, fence})
	w.mu.Unlock()
}

// wait returns once the stream has ended; Close calls it after the calls
// of the backend ended, so after any follow.
func (w *lossWatch) wait() {
	if w.started {
		<-w.done
	}
}

// run follows the stream until Close, opening it again after a failure
// with a capped, jittered backoff.
func (w *lossWatch) run() {
	defer close(w.done)
	ctx := w.b.closing
	bo := backoff{min: 50 * time.Millisecond, max: 5 * time.Second}
	for ctx.Err() == nil {
		stream, err := w.b.rpc.Watch(ctx, connect.NewRequest(&distlockv1.WatchRequest{}))
		if err == nil {
			for stream.Receive() {
				bo.n = 0
				w.event(stream.Msg().GetEvent())
			}
			_ = stream.Close()
		}
		sleep(ctx, bo.next())
	}
}

// event ends the Lost context of the grant an expiry or a forced release
// is about, and the Requested context of the grant a request to release
// is about. A release of a grant this backend is not releasing is an end
// the service could not explain (a forced release through another
// instance, seen there only as the key gone) or another holder of its
// token's doing: the backend asks the service whether the grant is still
// held.
func (w *lossWatch) event(ev *distlockv1.Event) {
	kf := keyFence{ev.GetLock().GetKey(), ev.GetLock().GetFence()}
	w.mu.Lock()
	id, ok := w.byFence[kf]
	w.mu.Unlock()
	if !ok {
		return
	}
	switch ev.GetType() {
	case distlockv1.Event_TYPE_EXPIRED, distlockv1.Event_TYPE_FORCE_RELEASED:
		w.b.drop(id, true)
	case distlockv1.Event_TYPE_RELEASE_REQUESTED:
		w.b.asked(id, ev.GetReason())
	case distlockv1.Event_TYPE_RELEASED:
		w.b.verify(kf.key, kf.fence, id)
	}
}
