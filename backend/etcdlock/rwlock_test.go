package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// A waiting writer's intent keeps readers out while the writer retries,
// past driver.WriteIntentTTL, on one key; once it stops retrying, readers
// get in after the intent's lease. A withdrawn intent lets them in at once,
// and a granted writer's intent is gone.
func TestWriteIntentLease(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	cli, prefix := admin(t, eps), uniquePrefix(t)
	b := dial(t, eps, prefix)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seq := 0
	try := func(mode driver.Mode, intent string) (string, error) {
		seq++
		token := fmt.Sprintf("%032x", seq)
		_, err := b.AcquireRW(ctx, driver.AcquireRequest{Key: "rw", Token: token, TTL: 10 * time.Second, Intent: intent}, mode)
		return token, err
	}
	intents := func() []string {
		var out []string
		for _, k := range storeKeys(t, cli, prefix, "\x00rw\x00rw\x00") {
			if strings.Contains(k, "%00i/") {
				out = append(out, k)
			}
		}
		return out
	}
	reader, err := try(driver.Shared, "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for time.Since(start) < driver.WriteIntentTTL+time.Second { // the writer retries, paced well within the TTL
		if _, err := try(driver.Exclusive, "w1"); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("a writer while a reader holds: %v, want ErrNotAcquired", err)
		}
		if _, err := try(driver.Shared, ""); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("a reader %v after a writer began waiting: %v, want ErrNotAcquired", time.Since(start).Round(time.Millisecond), err)
		}
		time.Sleep(300 * time.Millisecond) // pacing, not synchronisation
	}
	if got := intents(); len(got) != 1 {
		t.Fatalf("intent keys of one waiting writer: %q, want one", got)
	}
	stopped := time.Now()
	var r2 string
	for r2, err = try(driver.Shared, ""); errors.Is(err, driver.ErrNotAcquired) && time.Since(stopped) < 10*time.Second; r2, err = try(driver.Shared, "") {
		time.Sleep(50 * time.Millisecond) // polling the store, bounded
	}
	if err != nil {
		t.Fatalf("a reader after the writer stopped retrying: %v", err)
	}
	if took := time.Since(stopped); took < driver.WriteIntentTTL/2 {
		t.Errorf("a reader got in %v after the writer's last attempt: the intent should keep readers out for about %v", took, driver.WriteIntentTTL)
	}

	if _, err := try(driver.Exclusive, "w2"); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer while readers hold: %v, want ErrNotAcquired", err)
	}
	if err := b.WithdrawIntent(ctx, "rw", "w2"); err != nil {
		t.Fatal(err)
	}
	r3, err := try(driver.Shared, "")
	if err != nil {
		t.Fatalf("a reader after the writer withdrew its intent: %v", err)
	}

	if _, err := try(driver.Exclusive, "w3"); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer while readers hold: %v, want ErrNotAcquired", err)
	}
	for _, tok := range []string{reader, r2, r3} {
		if err := b.ReleaseRW(ctx, "rw", tok); err != nil {
			t.Fatal(err)
		}
	}
	w, err := try(driver.Exclusive, "w3")
	if err != nil {
		t.Fatalf("the waiting writer once the readers left: %v", err)
	}
	if got := intents(); len(got) != 0 {
		t.Fatalf("intent keys after the writer was granted: %q, want none", got)
	}
	if err := b.ReleaseRW(ctx, "rw", w); err != nil {
		t.Fatal(err)
	}
	if err := b.ReleaseRW(ctx, "rw", w); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("a second release: %v, want ErrNotHeld", err)
	}
}

// A hold is renewed and released by token whether or not this backend
// granted it, in either mode.
func TestRWHoldByTokenOnAnotherBackend(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	prefix := uniquePrefix(t)
	a, b := dial(t, eps, prefix), dial(t, eps, prefix)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, mode := range []driver.Mode{driver.Shared, driver.Exclusive} {
		token := fmt.Sprintf("%032x", i+1)
		if _, err := a.AcquireRW(ctx, driver.AcquireRequest{Key: "rw", Token: token, TTL: 5 * time.Second}, mode); err != nil {
			t.Fatal(err)
		}
		if err := b.RenewRW(ctx, "rw", token, 5*time.Second); err != nil {
			t.Fatalf("%s hold renewed on another backend: %v", mode, err)
		}
		if err := b.ReleaseRW(ctx, "rw", token); err != nil {
			t.Fatalf("%s hold released on another backend: %v", mode, err)
		}
		if err := a.RenewRW(ctx, "rw", token, 5*time.Second); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("%s hold renewed after its release: %v, want ErrNotHeld", mode, err)
		}
	}
}

// rwAttempts counts the single attempts a backend makes on read-write
// locks.
type rwAttempts struct {
	*etcdlock.Backend
	n *atomic.Int64
}

func (a rwAttempts) AcquireRW(ctx context.Context, req driver.AcquireRequest, mode driver.Mode) (driver.Grant, error) {
	a.n.Add(1)
	return a.Backend.AcquireRW(ctx, req, mode)
}

// Readers and a writer waiting behind a writer's hold do not wake each
// other with their refused attempts or the writer's intent: they make
// about as many attempts as the client's poll alone would.
func TestRefusedRWAttemptsWakeNobody(t *testing.T) {
	const waiters, wait = 4, 1500 * time.Millisecond
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	prefix := uniquePrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := distlock.New(dial(t, eps, prefix))
	defer holder.Close()
	m, err := holder.RWMutex("rw")
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	errs := make(chan error, waiters)
	for i := range waiters {
		c := distlock.New(rwAttempts{dial(t, eps, prefix), &n})
		defer c.Close()
		m, err := c.RWMutex("rw")
		if err != nil {
			t.Fatal(err)
		}
		take := m.RLock
		if i == 0 {
			take = m.Lock
		}
		go func() {
			_, err := take(ctx, distlock.WithWait(wait))
			errs <- err
		}()
	}
	for range waiters {
		if err := <-errs; !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("a waiter while the writer holds: %v, want ErrNotAcquired", err)
		}
	}
	if got := n.Load(); got > waiters*60 {
		t.Errorf("%d attempts by %d waiters in %v: refused attempts wake the other waiters", got, waiters, wait)
	} else {
		t.Logf("%d attempts by %d waiters in %v", got, waiters, wait)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
