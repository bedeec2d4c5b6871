// Package idemtest is the suite every idem.Store passes, through a Keeper
// over it: exported so that a store of another package runs the same checks.
package idemtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/idem"
)

// Duplicates is how many concurrent callers of one key the suite runs.
const Duplicates = 16

// Run checks k: concurrent duplicates run fn once and share its result, later
// duplicates replay it, a different request is refused, recorded failures
// replay, unrecorded errors leave the key free, and a live record is never
// replaced, even by attempts that ran at once (a lost lock). Every key is
// unique to the run.
func Run(t *testing.T, k *idem.Keeper, store idem.Store) {
	prefix := fmt.Sprintf("%s/%d/", t.Name(), time.Now().UnixNano())
	t.Run("Duplicates", func(t *testing.T) { testDuplicates(t, k, prefix+"dup") })
	t.Run("Conflict", func(t *testing.T) { testConflict(t, k, prefix+"conflict") })
	t.Run("Failure", func(t *testing.T) { testFailure(t, k, prefix+"failure") })
	t.Run("Retryable", func(t *testing.T) { testRetryable(t, k, prefix+"retry") })
	t.Run("WaitBounded", func(t *testing.T) { testWaitBounded(t, k, prefix+"wait") })
	t.Run("OnePutPerKey", func(t *testing.T) { testOnePut(t, store, prefix+"oneput") })
	t.Run("LostLockRecordsOnce", func(t *testing.T) { testLostLockRecordsOnce(t, k, store, prefix+"lost") })
}

func testDuplicates(t *testing.T, k *idem.Keeper, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var runs atomic.Int32
	waits := k.Stats().Waits
	release := make(chan struct{})
	fn := func(ctx context.Context, fence uint64) ([]byte, error) {
		runs.Add(1)
		select { // hold the attempt until every duplicate has started
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []byte("charged:" + strconv.FormatUint(fence, 10)), nil
	}
	results := make([]idem.Result, Duplicates)
	errs := make([]error, Duplicates)
	var started, done sync.WaitGroup
	for i := range Duplicates {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			started.Done()
			results[i], errs[i] = k.Do(ctx, key, []byte("pay 10"), fn)
		}()
	}
	started.Wait()
	// Let the duplicates reach the store before the attempt finishes.
	waitFor(t, 5*time.Second, func() bool { return runs.Load() >= 1 && k.Stats().Waits-waits >= Duplicates-1 })
	close(release)
	done.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want 1", n)
	}
	replays := 0
	for i := range Duplicates {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if string(results[i].Value) != string(results[0].Value) || results[i].Fence != results[0].Fence {
			t.Fatalf("caller %d got %q (fence %d), caller 0 %q (fence %d)", i, results[i].Value, results[i].Fence, results[0].Value, results[0].Fence)
		}
		if results[i].Replayed {
			replays++
		}
	}
	if replays != Duplicates-1 {
		t.Fatalf("%d callers replayed, want %d", replays, Duplicates-1)
	}
	r, err := k.Do(ctx, key, []byte("pay 10"), fn)
	if err != nil || !r.Replayed || string(r.Value) != string(results[0].Value) {
		t.Fatalf("later duplicate: %+v, %v; want a replay of %q", r, err, results[0].Value)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times after a later duplicate, want 1", n)
	}
}

func testConflict(t *testing.T, k *idem.Keeper, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok := func(context.Context, uint64) ([]byte, error) { return []byte("ok"), nil }
	if _, err := k.Do(ctx, key, []byte("pay 10"), ok); err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err := k.Do(ctx, key, []byte("pay 11"), func(context.Context, uint64) ([]byte, error) { ran = true; return nil, nil })
	if !errors.Is(err, idem.ErrConflict) || ran {
		t.Fatalf("different request: err %v, fn ran %v; want ErrConflict and no run", err, ran)
	}
}

func testFailure(t *testing.T, k *idem.Keeper, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	declined := errors.New("card declined")
	runs := 0
	fn := func(context.Context, uint64) ([]byte, error) {
		runs++
		return nil, idem.Fail([]byte("declined"), declined)
	}
	r, err := k.Do(ctx, key, nil, fn)
	if !errors.Is(err, idem.ErrFailed) || !errors.Is(err, declined) || !r.Failed || string(r.Value) != "declined" {
		t.Fatalf("first run: %+v, %v; want a recorded failure", r, err)
	}
	r, err = k.Do(ctx, key, nil, fn)
	if !errors.Is(err, idem.ErrFailed) || !r.Failed || !r.Replayed || string(r.Value) != "declined" || runs != 1 {
		t.Fatalf("replay: %+v, %v, %d runs; want the recorded failure and 1 run", r, err, runs)
	}
}

func testRetryable(t *testing.T, k *idem.Keeper, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	busy := errors.New("upstream busy")
	if _, err := k.Do(ctx, key, nil, func(context.Context, uint64) ([]byte, error) { return nil, busy }); !errors.Is(err, busy) {
		t.Fatalf("err %v, want %v", err, busy)
	}
	_, err := k.Do(ctx, key, nil, func(context.Context, uint64) ([]byte, error) { panic("boom") })
	if !errors.Is(err, idem.ErrPanicked) {
		t.Fatalf("panicking fn: err %v, want ErrPanicked", err)
	}
	r, err := k.Do(ctx, key, nil, func(context.Context, uint64) ([]byte, error) { return []byte("done"), nil })
	if err != nil || r.Replayed || string(r.Value) != "done" {
		t.Fatalf("retry: %+v, %v; want a fresh run", r, err)
	}
}

// testWaitBounded: a duplicate waits for an attempt in progress only as long
// as its context allows, and fn does not run for it.
func testWaitBounded(t *testing.T, k *idem.Keeper, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	running, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := k.Do(ctx, key, nil, func(ctx context.Context, _ uint64) ([]byte, error) {
			close(running)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return []byte("first"), nil
		})
		first <- err
	}()
	select {
	case <-running:
	case <-ctx.Done():
		t.Fatal("the first attempt did not start")
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	start := time.Now()
	ran := false
	_, err := k.Do(short, key, nil, func(context.Context, uint64) ([]byte, error) { ran = true; return nil, nil })
	waited := time.Since(start)
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first attempt: %v", err)
	}
	if !errors.Is(err, distlock.ErrNotAcquired) || ran || waited > 5*time.Second {
		t.Fatalf("duplicate with a 100ms context: err %v after %v, fn ran %v; want ErrNotAcquired promptly and no run", err, waited, ran)
	}
}

// testOnePut: a live record is never replaced, whatever the fence of the
// write that comes after it; once its retention ends, a write records again.
func testOnePut(t *testing.T, s idem.Store, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Fences beyond 2^53 (a float64's exact integers) and 2^63 (int64) must
	// still be kept exactly.
	const base = 1<<63 + 1<<62
	put := func(key string, fence uint64, v string, keep time.Duration) bool {
		t.Helper()
		ok, err := s.Put(ctx, key, idem.Record{Value: []byte(v), Fence: base + fence}, keep)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !put(key, 5, "first", time.Minute) {
		t.Fatal("first put refused")
	}
	if put(key, 4, "lower", time.Minute) || put(key, 5, "same", time.Minute) || put(key, 6, "higher", time.Minute) {
		t.Fatal("a put over a live record was accepted")
	}
	r, ok, err := s.Get(ctx, key)
	if err != nil || !ok || string(r.Value) != "first" || r.Fence != base+5 {
		t.Fatalf("get: %+v, %v, %v; want first at fence 5", r, ok, err)
	}
	if _, ok, err := s.Get(ctx, key+"/absent"); ok || err != nil {
		t.Fatalf("get of an absent key: %v, %v", ok, err)
	}
	expiring := key + "/expiring"
	if !put(expiring, 7, "short", 50*time.Millisecond) {
		t.Fatal("first put of a short record refused")
	}
	time.Sleep(100 * time.Millisecond)
	if !put(expiring, 3, "after", time.Minute) {
		t.Fatal("a put after the record's retention ended was refused")
	}
}

// testLostLockRecordsOnce: two attempts of one key run at once, as they do
// when the first one's lock is lost behind its back (an operator's
// ForceRelease, a pause past its lease) and a duplicate takes the key.
// Whichever records first, with whatever fences, the other's result is
// refused with ErrSuperseded and never recorded over it: every caller that
// gets a result gets the same one, and so do later duplicates. The second
// attempt here takes its locks from a store of its own, which is what the
// lost lock amounts to.
func testLostLockRecordsOnce(t *testing.T, k *idem.Keeper, store idem.Store, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	other := distlock.New(memlock.New())
	defer other.Close()
	k2, err := idem.New(other, store)
	if err != nil {
		t.Fatal(err)
	}
	for i, order := range [][2]*idem.Keeper{{k, k2}, {k2, k}} {
		key := fmt.Sprintf("%s/%d", key, i)
		slow, fast := order[0], order[1]
		inFn, finish := make(chan struct{}), make(chan struct{})
		type outcome struct {
			r   idem.Result
			err error
		}
		slowDone := make(chan outcome, 1)
		go func() {
			r, err := slow.Do(ctx, key, []byte("pay 10"), func(ctx context.Context, fence uint64) ([]byte, error) {
				close(inFn)
				<-finish
				return []byte("slow"), nil
			})
			slowDone <- outcome{r, err}
		}()
		<-inFn
		r, err := fast.Do(ctx, key, []byte("pay 10"), func(ctx context.Context, fence uint64) ([]byte, error) {
			return []byte("fast"), nil
		})
		if err != nil || string(r.Value) != "fast" {
			t.Fatalf("order %d: the attempt that finished first: %q, %v", i, r.Value, err)
		}
		close(finish)
		o := <-slowDone
		if o.err == nil {
			t.Fatalf("order %d: the attempt that finished second got %q recorded over %q: two callers, two results", i, o.r.Value, r.Value)
		}
		if !errors.Is(o.err, idem.ErrSuperseded) {
			t.Fatalf("order %d: the attempt that finished second: %v, want ErrSuperseded", i, o.err)
		}
		for _, kp := range order {
			replay, err := kp.Do(ctx, key, []byte("pay 10"), func(context.Context, uint64) ([]byte, error) {
				return nil, errors.New("fn ran for a recorded key")
			})
			if err != nil || string(replay.Value) != "fast" || !replay.Replayed {
				t.Fatalf("order %d: a later duplicate got %q (replayed %v), %v; want the recorded %q", i, replay.Value, replay.Replayed, err, "fast")
			}
		}
	}
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
