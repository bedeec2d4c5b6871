// Package batch sends the calls of concurrent goroutines in batches, for a
// client whose calls cost mostly their request, not their work: a call is
// sent at once while fewer than Limits.InFlight batches are out, and
// otherwise joins the next batch, sent as soon as one returns. A lone caller
// therefore waits for nothing, and under load many calls share a request.
package batch

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Limits bound the batches of a Queue.
type Limits struct {
	InFlight int // batches out at once
	Calls    int // calls in one batch
	Bytes    int // the sizes of a batch's calls, about; a larger call goes alone
}

// Call is one call, waiting for its batch or in it.
type Call[T, R any] struct {
	Arg  T
	key  string
	size int
	done chan result[R] // buffered: a caller that left is not waited for
}

type result[R any] struct {
	r   R
	err error
}

// Answer gives the call its result. The Queue's send function answers each
// call of a batch exactly once.
func (c *Call[T, R]) Answer(r R, err error) { c.done <- result[R]{r, err} }

// Queue batches the calls of one kind. Its send function makes a batch's
// calls, within the context it is given (the batch's bound, ended at the
// Queue's closing), and answers each.
type Queue[T, R any] struct {
	limits  Limits
	timeout time.Duration   // bounds a batch, as a request timeout bounds a call
	closing context.Context // ends the batches in flight
	send    func(ctx context.Context, calls []*Call[T, R])

	mu       sync.Mutex
	queue    []*Call[T, R] // in order of arrival
	sending  int           // batches in flight
	closed   error         // Close's error, returned to later calls
	inFlight sync.WaitGroup
}

// New returns a Queue that sends its batches with send, each bounded by
// timeout and ended early when closing ends.
func New[T, R any](limits Limits, timeout time.Duration, closing context.Context, send func(ctx context.Context, calls []*Call[T, R])) *Queue[T, R] {
	return &Queue[T, R]{limits: limits, timeout: timeout, closing: closing, send: send}
}

// Do makes a call of arg, whose size is about size bytes, and returns its
// answer. A batch holds at most one call of each non-empty key. If ctx ends
// first, Do returns its error: a call still queued is dropped, one already
// sent may or may not take effect, as when a lone request is cut short.
func (q *Queue[T, R]) Do(ctx context.Context, arg T, key string, size int) (R, error) {
	c := &Call[T, R]{Arg: arg, key: key, size: size, done: make(chan result[R], 1)}
	q.mu.Lock()
	if err := q.closed; err != nil {
		q.mu.Unlock()
		var zero R
		return zero, err
	}
	q.queue = append(q.queue, c)
	q.startLocked()
	q.mu.Unlock()
	select {
	case res := <-c.done:
		return res.r, res.err
	case <-ctx.Done():
		q.drop(c)
		var zero R
		return zero, ctx.Err()
	}
}

// Busy reports whether a call made now would wait for a batch to return.
func (q *Queue[T, R]) Busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sending >= q.limits.InFlight
}

// Close answers the queued calls with err, and every later one, and waits
// for the batches in flight, which the end of closing cuts short.
func (q *Queue[T, R]) Close(err error) {
	q.mu.Lock()
	q.closed = err
	for _, c := range q.queue {
		var zero R
		c.Answer(zero, err)
	}
	q.queue = nil
	q.mu.Unlock()
	q.inFlight.Wait()
}

// Hold keeps every batch from being sent until release is called: calls
// made meanwhile queue, and then go in batches, as under load. For tests.
func (q *Queue[T, R]) Hold() (release func()) {
	q.mu.Lock()
	q.sending += q.limits.InFlight
	q.mu.Unlock()
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.sending -= q.limits.InFlight
		for range q.limits.InFlight {
			q.startLocked()
		}
	}
}

// Queued returns how many calls wait for a batch.
func (q *Queue[T, R]) Queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// drop takes c out of the queue if it is still there: a caller that left
// before its call was sent leaves nothing behind.
func (q *Queue[T, R]) drop(c *Call[T, R]) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i := slices.Index(q.queue, c); i >= 0 {
		q.queue = slices.Delete(q.queue, i, i+1)
	}
}

// startLocked sends the next batch if calls wait, fewer than
// Limits.InFlight batches are out, and the Queue is not closing (its queued
// calls then wait for Close's answer). q.mu is held.
func (q *Queue[T, R]) startLocked() {
	if q.closed != nil || q.closing.Err() != nil || q.sending >= q.limits.InFlight || len(q.queue) == 0 {
		return
	}
	batch := q.takeLocked()
	q.sending++
	q.inFlight.Add(1)
	go func() {
		defer q.inFlight.Done()
		ctx, cancel := context.WithTimeout(q.closing, q.timeout)
		q.send(ctx, batch)
		cancel()
		q.mu.Lock()
		defer q.mu.Unlock()
		q.sending--
		q.startLocked()
	}()
}

// takeLocked removes the next batch from the queue: calls in order of
// arrival, one per key, within the limits. q.mu is held.
func (q *Queue[T, R]) takeLocked() []*Call[T, R] {
	var (
		batch []*Call[T, R]
		keys  = make(map[string]bool)
		rest  = q.queue[:0]
		size  int
	)
	for _, c := range q.queue {
		fits := len(batch) == 0 || len(batch) < q.limits.Calls && size+c.size <= q.limits.Bytes
		if !fits || c.key != "" && keys[c.key] {
			rest = append(rest, c)
			continue
		}
		keys[c.key] = true
		size += c.size
		batch = append(batch, c)
	}
	clear(q.queue[len(rest):])
	q.queue = rest
	return batch
}
