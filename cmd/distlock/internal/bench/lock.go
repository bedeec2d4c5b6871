package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/observe"
)

// lockTarget takes locks through distlock clients; worker w uses client
// w mod len(clients).
type lockTarget struct {
	clients []*distlock.Client
	opts    []distlock.Option
}

// callSlotKey is the context key of the callSlot of one Lock call.
type callSlotKey struct{}

// callSlot receives the outcome of the first acquire request of one Lock
// call: when its answer came (monotonic nanoseconds since the call began),
// and whether it granted the lock.
type callSlot struct {
	start     time.Time
	firstDone atomic.Int64 // 0: no answer yet
	firstOK   atomic.Bool
}

// callObserver records, for each Lock call carrying a callSlot, the first
// acquire request's answer.
type callObserver struct{}

// AcquireStarted returns ctx unchanged: the slot is already in it.
func (callObserver) AcquireStarted(ctx context.Context, _ observe.Event) context.Context { return ctx }

// Observe records the answer of a Lock call's first acquire request.
func (callObserver) Observe(ctx context.Context, e observe.Event) {
	if e.Kind != observe.StoreCall || e.Op != "acquire" {
		return
	}
	s, ok := ctx.Value(callSlotKey{}).(*callSlot)
	if ok && s.firstDone.CompareAndSwap(0, max(1, int64(time.Since(s.start)))) {
		s.firstOK.Store(e.Err == nil)
	}
}

// lock takes key through worker w's client. The wait it returns is what
// the key being held cost: zero when the first acquire request granted the
// lock, else the time from that request's answer (or, for a store that
// queues natively without one, from the call) until the grant.
func (t *lockTarget) lock(ctx context.Context, w int, key string) (func(context.Context) error, time.Duration, error) {
	slot := &callSlot{start: time.Now()}
	l, err := t.clients[w%len(t.clients)].Lock(context.WithValue(ctx, callSlotKey{}, slot), key, t.opts...)
	if err != nil {
		return nil, 0, err
	}
	if slot.firstOK.Load() {
		return l.Release, 0, nil
	}
	return l.Release, time.Since(slot.start) - time.Duration(slot.firstDone.Load()), nil
}

// close closes every client.
func (t *lockTarget) close() error {
	var errs []error
	for _, c := range t.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
