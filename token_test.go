package distlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
)

const (
	tokenA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	tokenB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// TestAcquireTokenRoundTrip grants a key under the caller's token, refuses
// it to another token, renews and releases it by token, and reports
// ErrNotHeld once it is gone.
func TestAcquireTokenRoundTrip(t *testing.T) {
	ctx := context.Background()
	c := distlock.New(memlock.New())
	defer c.Close()
	g, err := c.AcquireToken(ctx, "k", tokenA, distlock.WithLease(time.Minute), distlock.WithOwner("remote"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Token != tokenA || g.Key != "k" || g.Fence == 0 || g.Lease != time.Minute || g.Sent.IsZero() {
		t.Fatalf("grant %+v: want token A, key k, a fence, a minute's lease and a send time", g)
	}
	if _, err := c.AcquireToken(ctx, "k", tokenB, distlock.WithLease(time.Minute)); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("another token: got %v, want ErrNotAcquired", err)
	}
	// A retry under the same token is granted again or refused, as the
	// store has it; renewing proves the token holds the key either way.
	if _, err := c.AcquireToken(ctx, "k", tokenA, distlock.WithLease(time.Minute)); err != nil && !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("the same token again: got %v, want a grant or ErrNotAcquired", err)
	}
	if err := c.RenewToken(ctx, "k", tokenA, time.Minute); err != nil {
		t.Fatalf("renew by the holder's token: %v", err)
	}
	if err := c.RenewToken(ctx, "k", tokenB, time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("renew by another token: got %v, want ErrNotHeld", err)
	}
	info, err := c.Inspect(ctx, "k")
	if err != nil || !info.Held || info.Meta.Owner != "remote" || info.Fence < g.Fence {
		t.Fatalf("inspect: %+v, %v; want held by remote at fence %d or later", info, err, g.Fence)
	}
	if err := c.ReleaseToken(ctx, "k", tokenB); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("release by another token: got %v, want ErrNotHeld", err)
	}
	if err := c.ReleaseToken(ctx, "k", tokenA); err != nil {
		t.Fatal(err)
	}
	if err := c.ReleaseToken(ctx, "k", tokenA); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("second release: got %v, want ErrNotHeld", err)
	}
	g2, err := c.AcquireToken(ctx, "k", tokenB, distlock.WithLease(time.Minute))
	if err != nil || g2.Fence <= g.Fence {
		t.Fatalf("after release: %+v, %v; want a grant with a fence above %d", g2, err, g.Fence)
	}
}

// TestAcquireTokenBadInput refuses bad tokens, keys and leases before any
// store call.
func TestAcquireTokenBadInput(t *testing.T) {
	ctx := context.Background()
	c := distlock.New(memlock.New())
	defer c.Close()
	for name, token := range map[string]string{
		"empty":     "",
		"short":     "abc",
		"long":      strings.Repeat("a", distlock.MaxTokenLen+1),
		"space":     "aaaaaaaa aaaaaaaaaaaaaaaa",
		"newline":   "aaaaaaaaaaaaaaaa\n",
		"non-ascii": "aaaaaaaaaaaaaaaaé",
	} {
		if _, err := c.AcquireToken(ctx, "k", token); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s token: acquire got %v, want ErrInvalidOption", name, err)
		}
		if err := c.RenewToken(ctx, "k", token, time.Second); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s token: renew got %v, want ErrInvalidOption", name, err)
		}
		if err := c.ReleaseToken(ctx, "k", token); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s token: release got %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := c.AcquireToken(ctx, "", tokenA); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf("empty key: got %v, want ErrInvalidKey", err)
	}
	if _, err := c.AcquireToken(ctx, "k", tokenA, distlock.WithLease(-time.Second)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("negative lease: got %v, want ErrInvalidOption", err)
	}
	if err := c.RenewToken(ctx, "k", tokenA, 0); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("zero renewal: got %v, want ErrInvalidOption", err)
	}
	if info, err := c.Inspect(ctx, "k"); err != nil || info.Held {
		t.Fatalf("bad input changed the store: %+v, %v", info, err)
	}
}

// TestAcquireTokenWaitKeepsToken waits for a key a Lock holds on the same
// client (a backend that hands keys to local waiters, memlock): the waiter
// gets the key under its own token, not a fresh one, and is not kept alive.
func TestAcquireTokenWaitKeepsToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := distlock.New(memlock.New())
	defer c.Close()
	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		g   distlock.TokenGrant
		err error
	}
	done := make(chan result, 1)
	go func() {
		g, err := c.AcquireToken(ctx, "k", tokenA, distlock.WithWait(5*time.Second), distlock.WithLease(200*time.Millisecond))
		done <- result{g, err}
	}()
	time.Sleep(20 * time.Millisecond) // let it queue
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.g.Token != tokenA {
		t.Fatalf("waiter: %+v, %v; want the key under token A", r.g, r.err)
	}
	if err := c.RenewToken(ctx, "k", tokenA, 200*time.Millisecond); err != nil {
		t.Fatalf("renew under the waiter's own token: %v", err)
	}
	// Nothing renews it: the lease runs out and another takes the key.
	l2, err := c.Lock(ctx, "k", distlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("the lease of a token grant did not run out: %v", err)
	}
	_ = l2.Release(ctx)
}

// reasonRecorder is a backend that records the reason each ForceRelease
// reaches it with.
type reasonRecorder struct {
	*memlock.Backend
	reasons []string
}

func (r *reasonRecorder) ForceRelease(ctx context.Context, key string, opts driver.ForceOptions) (distlock.Info, error) {
	r.reasons = append(r.reasons, opts.Reason)
	return r.Backend.ForceRelease(ctx, key, opts)
}

// TestForceReleaseReasonReachesBackend: the operator's reason travels to the
// backend, so a lock service can write it to its audit log.
func TestForceReleaseReasonReachesBackend(t *testing.T) {
	ctx := context.Background()
	rec := &reasonRecorder{Backend: memlock.New()}
	c := distlock.New(rec)
	defer c.Close()
	if _, err := c.AcquireToken(ctx, "k", tokenA, distlock.WithLease(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceRelease(ctx, "k", "holder hung; ticket 7"); err != nil {
		t.Fatal(err)
	}
	if len(rec.reasons) != 1 || rec.reasons[0] != "holder hung; ticket 7" {
		t.Fatalf("reasons the backend saw: %q", rec.reasons)
	}
}

// TestPermitTokenRoundTrip takes a semaphore's permits under callers'
// tokens, refuses one past the limit, and renews and releases them by
// token from another handle, as a lock service does for its clients; a
// closed handle releases nothing it granted by token.
func TestPermitTokenRoundTrip(t *testing.T) {
	const tokenC = "cccccccccccccccccccccccccccccccc"
	ctx := context.Background()
	c := distlock.New(memlock.New())
	defer c.Close()
	sem, err := c.Semaphore("s", 2)
	if err != nil {
		t.Fatal(err)
	}
	a, err := sem.AcquireToken(ctx, tokenA, distlock.WithLease(time.Minute), distlock.WithOwner("remote"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sem.AcquireToken(ctx, tokenB, distlock.WithLease(time.Minute))
	if err != nil || b.Fence <= a.Fence || a.Token != tokenA || a.Key != "s" {
		t.Fatalf("grants %+v and %+v, %v: want two permits of s, fences increasing", a, b, err)
	}
	if _, err := sem.AcquireToken(ctx, tokenC, distlock.WithLease(time.Minute)); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a third permit of two: %v, want ErrNotAcquired", err)
	}
	if err := sem.Close(); err != nil {
		t.Fatal(err)
	}
	other, err := c.Semaphore("s", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if info, err := other.Inspect(ctx); err != nil || len(info.Held) != 2 {
		t.Fatalf("after the granting handle closed: %+v, %v; want both permits held", info, err)
	}
	if err := other.RenewToken(ctx, tokenA, time.Minute); err != nil {
		t.Fatalf("renew by token: %v", err)
	}
	if err := other.RenewToken(ctx, tokenC, time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("renew by a token with no permit: %v, want ErrNotHeld", err)
	}
	if err := other.ReleaseToken(ctx, tokenA); err != nil {
		t.Fatal(err)
	}
	if err := other.ReleaseToken(ctx, tokenA); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
	if g, err := other.AcquireToken(ctx, tokenC, distlock.WithLease(time.Minute)); err != nil || g.Fence <= b.Fence {
		t.Fatalf("a permit after a release: %+v, %v; want one with a fence above %d", g, err, b.Fence)
	}
}

// TestRWTokenRoundTrip takes a read-write lock's holds under callers'
// tokens: readers share it, a writer is refused while they hold it, a
// writer waiting by token keeps a new reader out, and holds are renewed
// and released by token from another handle.
func TestRWTokenRoundTrip(t *testing.T) {
	const tokenC, tokenD = "cccccccccccccccccccccccccccccccc", "dddddddddddddddddddddddddddddddd"
	ctx := context.Background()
	c := distlock.New(memlock.New())
	defer c.Close()
	m, err := c.RWMutex("rw")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	lease := distlock.WithLease(time.Minute)
	a, err := m.AcquireToken(ctx, false, tokenA, lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.AcquireToken(ctx, false, tokenB, lease); err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	if _, err := m.AcquireToken(ctx, true, tokenC, lease); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a writer while readers hold: %v, want ErrNotAcquired", err)
	}
	type result struct {
		g   distlock.TokenGrant
		err error
	}
	writer := make(chan result, 1)
	go func() {
		g, err := m.AcquireToken(ctx, true, tokenC, lease, distlock.WithWait(10*time.Second))
		writer <- result{g, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := m.Inspect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.WritersWaiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiting writer's intent did not show within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := m.AcquireToken(ctx, false, tokenD, lease); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a new reader while a writer waits: %v, want ErrNotAcquired", err)
	}
	other, err := c.RWMutex("rw")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.RenewToken(ctx, tokenA, time.Minute); err != nil {
		t.Fatalf("renew a reader by token: %v", err)
	}
	for _, tok := range []string{tokenA, tokenB} {
		if err := other.ReleaseToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	w := <-writer
	if w.err != nil || w.g.Fence <= a.Fence {
		t.Fatalf("the waiting writer: %+v, %v; want a grant with a fence above %d", w.g, w.err, a.Fence)
	}
	if err := other.ReleaseToken(ctx, tokenC); err != nil {
		t.Fatal(err)
	}
	if err := other.ReleaseToken(ctx, tokenC); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
}

// TestRWTokenIntent: a writer's refused attempt by token with the caller's
// write intent keeps new readers out until the caller withdraws it.
func TestRWTokenIntent(t *testing.T) {
	ctx := context.Background()
	c := distlock.New(memlock.New())
	defer c.Close()
	m, err := c.RWMutex("rw")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.AcquireToken(ctx, false, tokenA); err != nil {
		t.Fatal(err)
	}
	const intent = "writer-intent-0001"
	if _, err := m.AcquireToken(ctx, true, tokenB, distlock.WithWriteIntent(intent)); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a writer while a reader holds: %v, want ErrNotAcquired", err)
	}
	if info, err := m.Inspect(ctx); err != nil || info.WritersWaiting != 1 {
		t.Fatalf("after the refused writer: %+v, %v; want its intent kept", info, err)
	}
	if _, err := m.AcquireToken(ctx, false, "cccccccccccccccccccccccccccccccc"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a new reader under the intent: %v, want ErrNotAcquired", err)
	}
	if err := m.WithdrawIntent(ctx, intent); err != nil {
		t.Fatal(err)
	}
	if _, err := m.AcquireToken(ctx, false, "cccccccccccccccccccccccccccccccc"); err != nil {
		t.Fatalf("a new reader after the intent was withdrawn: %v", err)
	}
}
