package batch_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/internal/batch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder sends each batch by answering every call with its argument
// doubled, and keeps the batches it sent.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
}

func (r *recorder) send(_ context.Context, calls []*batch.Call[int, int]) {
	args := make([]int, len(calls))
	for i, c := range calls {
		args[i] = c.Arg
	}
	r.mu.Lock()
	r.batches = append(r.batches, args)
	r.mu.Unlock()
	for _, c := range calls {
		c.Answer(2*c.Arg, nil)
	}
}

func (r *recorder) sent() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

func newQueue(t *testing.T, limits batch.Limits, send func(context.Context, []*batch.Call[int, int])) *batch.Queue[int, int] {
	q := batch.New(limits, time.Second, t.Context(), send)
	t.Cleanup(func() { q.Close(errors.New("closed")) })
	return q
}

// waitQueued waits until n calls are queued.
func waitQueued(t *testing.T, q *batch.Queue[int, int], n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); q.Queued() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", q.Queued(), n)
		}
	}
}

// A lone call goes at once, in a batch of its own, and gets its answer.
func TestLoneCall(t *testing.T) {
	var r recorder
	q := newQueue(t, batch.Limits{InFlight: 2, Calls: 8, Bytes: 100}, r.send)
	got, err := q.Do(t.Context(), 21, "", 1)
	if err != nil || got != 42 {
		t.Fatalf("Do(21) = %d, %v; want 42", got, err)
	}
	if b := r.sent(); !slices.EqualFunc(b, [][]int{{21}}, slices.Equal) {
		t.Errorf("batches %v, want one of the lone call", b)
	}
}

// Calls that queue go in batches within the limits: at most Calls calls,
// about Bytes bytes (a call that does not fit waits for a later batch, and
// a larger one goes alone), one per key, in order of arrival; each gets its
// own answer.
func TestBatchesWithinLimits(t *testing.T) {
	var r recorder
	q := newQueue(t, batch.Limits{InFlight: 1, Calls: 3, Bytes: 10}, r.send)
	release := q.Hold()
	type call struct {
		key  string
		size int
	}
	calls := []call{{"a", 1}, {"b", 1}, {"a", 1}, {"c", 1}, {"", 20}, {"d", 4}, {"e", 4}, {"f", 4}}
	answers := make([]int, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		waitQueued(t, q, i) // in order of arrival
		wg.Go(func() {
			got, err := q.Do(t.Context(), i, c.key, c.size)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
			answers[i] = got
		})
	}
	waitQueued(t, q, len(calls))
	release()
	wg.Wait()
	for i, got := range answers {
		if got != 2*i {
			t.Errorf("call %d answered %d, want %d", i, got, 2*i)
		}
	}
	want := [][]int{{0, 1, 3}, {2, 5, 6}, {4}, {7}}
	if b := r.sent(); !slices.EqualFunc(b, want, slices.Equal) {
		t.Errorf("batches %v, want %v", b, want)
	}
}

// A queued call whose context ends returns its error at once and is never
// sent; the others are.
func TestQueuedCallCancelled(t *testing.T) {
	var r recorder
	q := newQueue(t, batch.Limits{InFlight: 1, Calls: 8, Bytes: 100}, r.send)
	release := q.Hold()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := q.Do(ctx, 1, "", 1)
		done <- err
	}()
	waitQueued(t, q, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := q.Do(t.Context(), 2, "", 1); err != nil {
			t.Error(err)
		}
	})
	waitQueued(t, q, 2)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled call returned %v, want its context's error", err)
	}
	release()
	wg.Wait()
	if b := r.sent(); !slices.EqualFunc(b, [][]int{{2}}, slices.Equal) {
		t.Errorf("batches %v, want only the call that stayed", b)
	}
}

// Close answers the queued calls with its error, and every later call;
// it waits for the batch in flight, which its closing context ends.
func TestClose(t *testing.T) {
	closing, stop := context.WithCancel(context.Background())
	inSend := make(chan struct{})
	var ended error
	q := batch.New(batch.Limits{InFlight: 1, Calls: 8, Bytes: 100}, time.Minute, closing, func(ctx context.Context, calls []*batch.Call[int, int]) {
		close(inSend)
		<-ctx.Done()
		ended = ctx.Err()
		for _, c := range calls {
			c.Answer(0, ctx.Err())
		}
	})
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { _, errs[0] = q.Do(context.Background(), 1, "", 1) })
	<-inSend
	wg.Go(func() { _, errs[1] = q.Do(context.Background(), 2, "", 1) })
	waitQueued(t, q, 1)
	closed := errors.New("closed")
	stop()
	q.Close(closed)
	wg.Wait()
	if ended == nil || !errors.Is(errs[0], context.Canceled) {
		t.Errorf("the call in flight: %v (its batch ended with %v), want the closing context's end", errs[0], ended)
	}
	if !errors.Is(errs[1], closed) {
		t.Errorf("the queued call: %v, want Close's error", errs[1])
	}
	if _, err := q.Do(context.Background(), 3, "", 1); !errors.Is(err, closed) {
		t.Errorf("a call after Close: %v, want Close's error", err)
	}
}

// Busy says whether a call would wait: once InFlight batches are out.
func TestBusy(t *testing.T) {
	unblock := make(chan struct{})
	started := make(chan struct{}, 2)
	q := newQueue(t, batch.Limits{InFlight: 2, Calls: 8, Bytes: 100}, func(_ context.Context, calls []*batch.Call[int, int]) {
		started <- struct{}{}
		<-unblock
		for _, c := range calls {
			c.Answer(c.Arg, nil)
		}
	})
	var wg sync.WaitGroup
	for i := range 2 {
		if q.Busy() {
			t.Fatalf("busy with %d batches out of 2", i)
		}
		wg.Go(func() { _, _ = q.Do(t.Context(), i, "", 1) })
		<-started
	}
	if !q.Busy() {
		t.Error("not busy with 2 batches out of 2")
	}
	close(unblock)
	wg.Wait()
}
