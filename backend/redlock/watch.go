package redlock

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

var _ driver.Notifier = (*Backend)(nil)

// Watch returns a channel that fires when key was released or force
// released: redislock's Watch on every node, whose notices it gathers. A
// release by a holder frees the key on the majority that granted it, so
// the channel fires once a majority of the nodes announced a release (or a
// confirmed or lost subscription, after which a notice may be missing). A
// notice from fewer, such as the undoing of an attempt that got no
// majority, fires it only after a random wait of up to forty round trips
// (partialWait times the delay below), as a poll would.
//
// Every process waiting for key hears the same release at the same
// moment; were they all to try at once, the nodes could split their votes
// so that nobody gets a majority. So the channel fires after a random
// delay, up to four times the round trip of the backend's last Acquire
// that every node answered (at least minRoundTrip): the first to try
// usually wins on every node before the others ask.
//
// Watch returns once a majority of the nodes took the watch, or after the
// node timeout (MinNodeTimeout if not set); a node that answers later joins
// the watch then, and one that fails sends no notices: the caller's poll
// finds what they would have told. It fails only for a bad key or a closed
// backend. stop must be called once.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := b.checkRequest(key, "-", nil); err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	wake := make(chan struct{}, 1)
	entered := make(chan bool, len(b.nodes))
	heard := make(chan int, len(b.nodes))
	var wg sync.WaitGroup
	for i, n := range b.nodes {
		wg.Go(func() {
			notices, stop, err := n.b.Watch(wctx, key)
			entered <- err == nil
			if err != nil {
				return
			}
			defer stop()
			for {
				select {
				case <-wctx.Done():
					return
				case <-notices:
					select {
					case heard <- i:
					case <-wctx.Done():
						return
					}
				}
			}
		})
	}
	wg.Go(func() { b.gather(wctx, heard, wake) })
	t := time.NewTimer(b.cfg.watchWait())
	defer t.Stop()
wait:
	for ok, answered := 0, 0; ok < b.quorum && answered < len(b.nodes); answered++ {
		select {
		case e := <-entered:
			if e {
				ok++
			}
		case <-t.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	var once sync.Once
	return wake, func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}, nil
}

// gather fires wake, after a random delay, once the nodes that sent a
// notice to heard (by index) are a majority, or a while after the first of
// them if they are fewer (see Watch), until ctx ends.
func (b *Backend) gather(ctx context.Context, heard <-chan int, wake chan<- struct{}) {
	var (
		from    = make([]bool, len(b.nodes))
		count   int
		partial <-chan time.Time
	)
	fire := func() {
		clear(from)
		count, partial = 0, nil
		t := time.NewTimer(b.noticeDelay())
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for len(heard) > 0 { // notices of the same release, come during the delay
			<-heard
		}
		select {
		case wake <- struct{}{}:
		default: // a wake is pending already
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case i := <-heard:
			if !from[i] {
				from[i] = true
				count++
			}
			if count >= b.quorum {
				fire()
			} else if partial == nil {
				partial = time.After(partialWait * b.noticeDelay())
			}
		case <-partial:
			fire()
		}
	}
}

// noticeDelay is a random delay in [0, 4×the last Acquire's round trip),
// the round trip being at least minRoundTrip.
func (b *Backend) noticeDelay() time.Duration {
	window := 4 * max(time.Duration(b.lastRoundTrip.Load()), minRoundTrip)
	return rand.N(window)
}

// partialWait is how many of noticeDelay's delays gather waits for a
// majority of notices before it fires on fewer.
const partialWait = 10

// minRoundTrip is the least round trip noticeDelay assumes.
const minRoundTrip = 500 * time.Microsecond
