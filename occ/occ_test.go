package occ_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/occ"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRetry(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	calls := 0
	count := func(results ...error) func(context.Context) error {
		calls = 0
		return func(context.Context) error {
			calls++
			return results[min(calls, len(results))-1]
		}
	}
	p := occ.Policy{MaxAttempts: 5, BaseDelay: time.Microsecond, MaxDelay: time.Millisecond}

	if err := occ.Retry(ctx, p, count(occ.ErrConflict, occ.ErrConflict, nil)); err != nil || calls != 3 {
		t.Errorf("two conflicts then success: err %v after %d calls, want nil after 3", err, calls)
	}
	if err := occ.Retry(ctx, p, count(occ.ErrConflict, boom)); !errors.Is(err, boom) || calls != 2 {
		t.Errorf("conflict then failure: err %v after %d calls, want boom after 2", err, calls)
	}
	if err := occ.Retry(ctx, p, count(occ.ErrConflict)); !errors.Is(err, occ.ErrConflict) || calls != 5 {
		t.Errorf("endless conflicts: err %v after %d calls, want ErrConflict after 5", err, calls)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	slow := occ.Policy{MaxAttempts: 1000, BaseDelay: time.Hour, MaxDelay: time.Hour}
	start := time.Now()
	if err := occ.Retry(cctx, slow, count(occ.ErrConflict)); !errors.Is(err, context.Canceled) || !errors.Is(err, occ.ErrConflict) || calls != 1 {
		t.Errorf("cancelled context: err %v after %d calls, want ErrConflict and Canceled after 1", err, calls)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a cancelled context still slept %v", d)
	}
	for name, bad := range map[string]occ.Policy{
		"negative attempts": {MaxAttempts: -1},
		"negative delay":    {BaseDelay: -time.Second},
		"max under base":    {BaseDelay: time.Second, MaxDelay: time.Millisecond},
	} {
		if err := occ.Retry(ctx, bad, count(nil)); !errors.Is(err, distlock.ErrInvalidOption) || calls != 0 {
			t.Errorf("%s: err %v after %d calls, want ErrInvalidOption and no call", name, err, calls)
		}
	}
}

func TestValueConflictChangesNothing(t *testing.T) {
	var v occ.Value[string]
	if _, err := v.CompareAndSwap(0, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.CompareAndSwap(0, "b"); !errors.Is(err, occ.ErrConflict) {
		t.Fatalf("stale swap: %v, want ErrConflict", err)
	}
	if s, version := v.Load(); s != "a" || version != 1 {
		t.Fatalf("after a stale swap: %q at version %d, want \"a\" at 1", s, version)
	}
	boom := errors.New("boom")
	err := occ.Update(context.Background(), occ.Policy{}, &v, func(string) (string, error) { return "c", boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Update with a failing function: %v", err)
	}
	if s, version := v.Load(); s != "a" || version != 1 {
		t.Fatalf("a failed Update changed the value: %q at version %d", s, version)
	}
}
