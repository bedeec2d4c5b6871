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
	"github.com/distlock/distlock/idem"
)

// Duplicates is how many concurrent callers of one key the suite runs.
const Duplicates = 16

// Run checks k: concurrent duplicates run fn once and share its result, later
// duplicates replay it, a different request is refused, recorded failures
// replay, unrecorded errors leave the key free, and a result recorded under a
// higher fence refuses a late one. Every key is unique to the run.
func Run(t *testing.T, k *idem.Keeper, store idem.Store) {
	prefix := fmt.Sprintf("%s/%d/", t.Name(), time.Now().UnixNano())
	t.Run("Duplicates", func(t *testing.T) { testDuplicates(t, k, prefix+"dup") })
	t.Run("Conflict", func(t *testing.T) { testConflict(t, k, prefix+"conflict") })
	t.Run("Failure", func(t *testing.T) { testFailure(t, k, prefix+"failure") })
	t.Run("Retryable", func(t *testing.T) { testRetryable(t, k, prefix+"retry") })
	t.Run("WaitBounded", func(t *testing.T) { testWaitBounded(t, k, prefix+"wait") })
	t.Run("FencedPut", func(t *testing.T) { testFencedPut(t, store, prefix+"fenced") })
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

func testFencedPut(t *testing.T, s idem.Store, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Fences beyond 2^53 (a float64's exact integers) and 2^63 (int64) must
	// still compare exactly.
	const base = 1<<63 + 1<<62
	put := func(fence uint64, v string) bool {
		t.Helper()
		ok, err := s.Put(ctx, key, idem.Record{Value: []byte(v), Fence: base + fence}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !put(5, "new") {
		t.Fatal("first put refused")
	}
	if put(4, "late") || put(5, "again") {
		t.Fatal("a put with a fence at most the recorded one was accepted")
	}
	if !put(6, "newer") {
		t.Fatal("a put with a higher fence was refused")
	}
	r, ok, err := s.Get(ctx, key)
	if err != nil || !ok || string(r.Value) != "newer" || r.Fence != base+6 {
		t.Fatalf("get: %+v, %v, %v; want newer at fence 6", r, ok, err)
	}
	if _, ok, err := s.Get(ctx, key+"/absent"); ok || err != nil {
		t.Fatalf("get of an absent key: %v, %v", ok, err)
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
