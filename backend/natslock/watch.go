package natslock

import (
	"context"
	"strconv"

	"github.com/nats-io/nats.go"
)

// NoticePrefix begins the subjects of release notices: a release or force
// release of key k in bucket B publishes the revision of its marker on
// NoticePrefix+"B."+escaped(k), outside the bucket's stream. A connection
// that waits needs to subscribe to them, one that releases to publish on
// them.
const NoticePrefix = "_distlock.released."

// released records that this backend ended the hold of key with the
// marker at revision rev, and tells the key's waiters, who then write
// their grant on that revision at once.
func (b *Backend) released(key, ekey string, rev uint64) {
	b.holds.put(key, hold{rev: rev})
	_ = b.nc.Publish(b.notices+ekey, strconv.AppendUint(nil, rev, 10)) // a lost notice leaves the waiters to their poll
}

// Watch subscribes to key's release notices and fires wake at each; the
// notice's revision becomes the condition of this backend's next grant of
// key. A hold whose time to live ran out, and a key an operator deleted
// with the Key-Value API, have no notice: the client's fallback poll finds
// them. A notice costs no request: a waiter hears a release as soon as
// the releaser has its acknowledgement.
func (b *Backend) Watch(_ context.Context, key string) (<-chan struct{}, func(), error) {
	if b.closed.Load() {
		return nil, nil, errClosed
	}
	wake := make(chan struct{}, 1)
	sub, err := b.nc.Subscribe(b.notices+EscapeKey(key), func(m *nats.Msg) {
		if rev, err := strconv.ParseUint(string(m.Data), 10, 64); err == nil {
			b.holds.put(key, hold{rev: rev})
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, nil, b.fail(err)
	}
	return wake, func() { _ = sub.Unsubscribe() }, nil
}
