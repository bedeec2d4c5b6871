package zklock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

// rwTokens are tokens for the tests of read-write locks, one per holder.
var rwTokens = [...]string{
	"0123456789abcdef0123456789abcdef",
	"1123456789abcdef0123456789abcdef",
	"2123456789abcdef0123456789abcdef",
	"3123456789abcdef0123456789abcdef",
}

// A writer's hold downgraded by another backend, by token, carries on on
// the backend that granted it: its renewals, written at the version it
// knew, read the downgrade and keep it, one with another TTL too; readers
// join it, writers stay out, and its fence and loss notice stay.
func TestRWDowngradeOnAnotherBackend(t *testing.T) {
	srv := zkServer(t)
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := dial(t, srv.Addr(), root), dial(t, srv.Addr(), root)
	defer a.Close()
	defer b.Close()
	const name = "down"
	writer, reader := rwTokens[0], rwTokens[1]
	g, err := a.AcquireRW(ctx, driver.AcquireRequest{Key: name, Token: writer, TTL: 10 * time.Second}, driver.Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DowngradeRW(ctx, name, writer); err != nil {
		t.Fatalf("DowngradeRW on another backend: %v", err)
	}
	for _, ttl := range []time.Duration{10 * time.Second, 20 * time.Second} {
		if err := a.RenewRW(ctx, name, writer, ttl); err != nil {
			t.Fatalf("renewal for %v on the granting backend after the downgrade: %v", ttl, err)
		}
	}
	if _, err := b.AcquireRW(ctx, driver.AcquireRequest{Key: name, Token: reader, TTL: 10 * time.Second}, driver.Shared); err != nil {
		t.Fatalf("a reader beside the downgraded hold, after its renewals: %v", err)
	}
	req := driver.AcquireRequest{Key: name, Token: rwTokens[2], TTL: 10 * time.Second}
	if _, err := b.AcquireRW(ctx, req, driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer beside the downgraded hold: %v, want ErrNotAcquired", err)
	}
	mode, held, _, err := a.InspectRW(ctx, name)
	if err != nil || mode != driver.Shared || len(held) != 2 || held[0].Fence != g.Fence {
		t.Fatalf("InspectRW: %v, %+v, %v; want two readers, the first with fence %d", mode, held, err, g.Fence)
	}
	if g.Lost.Err() != nil {
		t.Fatal("the downgraded hold was reported lost")
	}
	for _, token := range []string{writer, reader} {
		if err := a.ReleaseRW(ctx, name, token); err != nil {
			t.Fatal(err)
		}
	}
}

// A downgrade wakes name's watchers; a renewal of the writer's hold, which
// fires the watch on its node too, does not.
func TestRWDowngradeWakesWatchers(t *testing.T) {
	srv := zkServer(t)
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := dial(t, srv.Addr(), root), dial(t, srv.Addr(), root)
	defer a.Close()
	defer b.Close()
	const name = "wake"
	token := rwTokens[0]
	if _, err := a.AcquireRW(ctx, driver.AcquireRequest{Key: name, Token: token, TTL: 10 * time.Second}, driver.Exclusive); err != nil {
		t.Fatal(err)
	}
	wake, stop, err := b.WatchRW(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := a.RenewRW(ctx, name, token, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
		t.Fatal("a renewal of the writer's hold woke a watcher")
	case <-time.After(300 * time.Millisecond): // not synchronisation: a chance to misfire
	}
	if err := a.DowngradeRW(ctx, name, token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up within 5s of the downgrade")
	}
	if err := a.ReleaseRW(ctx, name, token); err != nil {
		t.Fatal(err)
	}
}

// A writer granted with a waiting writer's intent ahead of it in the queue
// (intents do not refuse writers) still holds once downgraded, as a
// reader's hold, and the intent still keeps new readers out; the waiting
// writer gets in once the downgraded hold ends.
func TestRWDowngradeBehindAnIntent(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := dial(t, srv.Addr(), root)
	defer b.Close()
	const name = "intent"
	hold := func(token string, mode driver.Mode, intent string) (driver.Grant, error) {
		return b.AcquireRW(ctx, driver.AcquireRequest{Key: name, Token: token, TTL: 10 * time.Second, Intent: intent}, mode)
	}
	if _, err := hold(rwTokens[0], driver.Shared, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := hold(rwTokens[1], driver.Exclusive, "waiting"); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer beside a reader: %v, want ErrNotAcquired", err)
	}
	if err := b.ReleaseRW(ctx, name, rwTokens[0]); err != nil {
		t.Fatal(err)
	}
	w, err := hold(rwTokens[2], driver.Exclusive, "")
	if err != nil {
		t.Fatalf("a writer behind an intent alone: %v", err)
	}
	if q := children(t, conn, rwPathOf(root, name)); len(q) != 2 {
		t.Fatalf("queue %q: want the intent's node and the writer's", q)
	}
	if err := b.DowngradeRW(ctx, name, rwTokens[2]); err != nil {
		t.Fatal(err)
	}
	mode, held, intents, err := b.InspectRW(ctx, name)
	if err != nil || mode != driver.Shared || len(held) != 1 || held[0].Fence != w.Fence || intents != 1 {
		t.Fatalf("InspectRW: %v, %+v, %d intents, %v; want the downgraded hold, fence %d, and one intent", mode, held, intents, err, w.Fence)
	}
	if _, err := hold(rwTokens[3], driver.Shared, ""); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a reader behind the intent: %v, want ErrNotAcquired", err)
	}
	if _, err := hold(rwTokens[1], driver.Exclusive, "waiting"); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("the waiting writer beside the downgraded hold: %v, want ErrNotAcquired", err)
	}
	if err := b.ReleaseRW(ctx, name, rwTokens[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := hold(rwTokens[1], driver.Exclusive, "waiting"); err != nil {
		t.Fatalf("the waiting writer once the downgraded hold ended: %v", err)
	}
	if err := b.ReleaseRW(ctx, name, rwTokens[1]); err != nil {
		t.Fatal(err)
	}
}

// A writer's node with a reader's hold ahead of it is an attempt, not a
// hold: a downgrade of its token by a backend that did not grant it is
// refused and leaves the node as it is.
func TestRWDowngradeOfAnAttempt(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := dial(t, srv.Addr(), root)
	defer b.Close()
	const name = "attempt"
	if _, err := b.AcquireRW(ctx, driver.AcquireRequest{Key: name, Token: rwTokens[0], TTL: 10 * time.Second}, driver.Shared); err != nil {
		t.Fatal(err)
	}
	// An attempt in flight, as a writer's AcquireRW makes one before it
	// lists the queue.
	data := []byte(`{"token":"` + rwTokens[1] + `","ttl_ms":10000,"meta":null}`)
	node, err := conn.Create(rwPathOf(root, name)+"/lock-w-"+rwTokens[1]+"-", data, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DowngradeRW(ctx, name, rwTokens[1]); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("DowngradeRW of an attempt: %v, want ErrNotHeld", err)
	}
	if got, _, err := conn.Get(node); err != nil || string(got) != string(data) {
		t.Fatalf("the attempt's node after a refused downgrade: %q, %v; want %q", got, err, data)
	}
	if err := conn.Delete(node, -1); err != nil {
		t.Fatal(err)
	}
	if err := b.ReleaseRW(ctx, name, rwTokens[0]); err != nil {
		t.Fatal(err)
	}
}
