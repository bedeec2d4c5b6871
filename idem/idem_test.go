package idem_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/idem"
	"github.com/distlock/distlock/idem/idemtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newKeeper(t *testing.T, store idem.Store, opts ...idem.Option) *idem.Keeper {
	t.Helper()
	c := distlock.New(memlock.New())
	t.Cleanup(func() { c.Close() })
	k, err := idem.New(c, store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestMemory(t *testing.T) {
	s := idem.NewMemoryStore()
	idemtest.Run(t, newKeeper(t, s), s)
}

func TestLoggerAndStats(t *testing.T) {
	var buf bytes.Buffer
	k := newKeeper(t, idem.NewMemoryStore(), idem.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := context.Background()
	ok := func(context.Context, uint64) ([]byte, error) { return []byte("ok"), nil }
	for _, req := range []string{"a", "a", "b"} {
		_, _ = k.Do(ctx, "k", []byte(req), ok)
	}
	want := idem.Stats{Executions: 1, Replays: 1, Conflicts: 1}
	if got := k.Stats(); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	if !strings.Contains(buf.String(), "request differs") || !strings.Contains(buf.String(), "key=k") {
		t.Fatalf("log %q names no conflict of key k", buf.String())
	}
}

func TestNewOptions(t *testing.T) {
	c := distlock.New(memlock.New())
	defer c.Close()
	s := idem.NewMemoryStore()
	for _, o := range []idem.Option{idem.WithRetention(0), idem.WithWait(-time.Second)} {
		if _, err := idem.New(c, s, o); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Fatalf("bad option: %v", err)
		}
	}
	if _, err := idem.New(nil, s); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("nil client: %v", err)
	}
	k, err := idem.New(c, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Do(context.Background(), "k", nil, nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("nil fn: %v", err)
	}
	ok := func(context.Context, uint64) ([]byte, error) { return nil, nil }
	for _, key := range []string{"", "bad\nkey", strings.Repeat("k", distlock.MaxKeyLen)} {
		if _, err := k.Do(context.Background(), key, nil, ok); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Fatalf("key %q: %v, want ErrInvalidKey", key, err)
		}
	}
}

// A lock lost while fn runs ends fn's context, and its result is not
// recorded: the next call runs fn again.
func TestLostLock(t *testing.T) {
	c := distlock.New(memlock.New())
	defer c.Close()
	// A short lease, renewed: the renewal finds the lock gone.
	k, err := idem.New(c, idem.NewMemoryStore(), idem.WithLockOptions(distlock.WithLease(300*time.Millisecond), distlock.WithWatchdog(true)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = k.Do(ctx, "k", nil, func(ctx context.Context, _ uint64) ([]byte, error) {
		if _, err := c.ForceRelease(ctx, idem.KeyPrefix+"k", "test"); err != nil {
			return nil, err
		}
		// Until the lock's loss (or the 10s of the test's context), then
		// succeed, as an fn that ignores its context would.
		<-ctx.Done()
		return []byte("late"), nil
	})
	if !errors.Is(err, idem.ErrSuperseded) || !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("err %v, want ErrSuperseded and ErrLockLost", err)
	}
	r, err := k.Do(ctx, "k", nil, func(context.Context, uint64) ([]byte, error) { return []byte("again"), nil })
	if err != nil || r.Replayed || string(r.Value) != "again" {
		t.Fatalf("%+v, %v; want a fresh run", r, err)
	}
}

// An operator's ForceRelease while an attempt runs lets a duplicate run fn
// too; the first to finish records, and the other's result is refused
// rather than recorded over it: one key, one result, for every caller.
func TestForceReleaseMidRunRecordsOnce(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	c := distlock.New(store)
	defer c.Close()
	k, err := idem.New(c, idem.NewMemoryStore(), idem.WithLockOptions(distlock.WithLease(time.Minute), distlock.WithWatchdog(true)))
	if err != nil {
		t.Fatal(err)
	}
	inFirst, inSecond, finishSecond := make(chan struct{}), make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := k.Do(ctx, "charge-7", []byte("pay 10"), func(context.Context, uint64) ([]byte, error) {
			close(inFirst)
			<-inSecond // the duplicate runs too
			return []byte("first"), nil
		})
		first <- err
	}()
	<-inFirst
	if _, err := store.ForceRelease(ctx, idem.KeyPrefix+"charge-7", driver.ForceOptions{}); err != nil {
		t.Fatal(err)
	}
	second := make(chan idem.Result, 1)
	go func() {
		r, err := k.Do(ctx, "charge-7", []byte("pay 10"), func(context.Context, uint64) ([]byte, error) {
			close(inSecond)
			<-finishSecond
			return []byte("second"), nil
		})
		if err != nil {
			r.Value = []byte(err.Error())
		}
		second <- r
	}()
	if err := <-first; err != nil {
		t.Fatalf("the first attempt to finish: %v", err)
	}
	close(finishSecond)
	if r := <-second; string(r.Value) == "second" {
		t.Fatal("the second attempt's result was recorded over the first's: two callers got two results")
	}
	r, err := k.Do(ctx, "charge-7", []byte("pay 10"), func(context.Context, uint64) ([]byte, error) { return []byte("third"), nil })
	if err != nil || string(r.Value) != "first" {
		t.Fatalf("a later duplicate got %q, %v; want the recorded %q", r.Value, err, "first")
	}
}
