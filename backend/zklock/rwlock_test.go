package zklock_test

import (
	"context"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

func rwPathOf(root, name string) string {
	return root + "/rw." + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// TestWriteIntentExpires records a writer's intent, as a waiting writer's
// refused attempt does, and never renews or withdraws it, as a writer that
// hung would: it keeps new readers out, and stops doing so once it was not
// renewed for driver.WriteIntentTTL. The intent is a node of its own,
// left in place of the refused attempt's.
func TestWriteIntentExpires(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	writer, reader := dial(t, srv.Addr(), root), distlock.New(dial(t, srv.Addr(), root))
	defer writer.Close()
	defer reader.Close()
	const name = "intent"
	m, err := reader.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := driver.AcquireRequest{Key: name, Token: "0123456789abcdef0123456789abcdef", TTL: time.Minute, Intent: "hung-writer"}
	if _, err := writer.AcquireRW(ctx, req, driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer while a reader holds: %v, want ErrNotAcquired", err)
	}
	recorded := time.Now()
	if c := children(t, conn, rwPathOf(root, name)); len(c) != 2 {
		t.Fatalf("queue %q: want the reader's node and the intent's", c)
	}
	if info, err := m.Inspect(ctx); err != nil || info.WritersWaiting != 1 || len(info.Held) != 1 {
		t.Fatalf("Inspect: %+v, %v; want one reader and one writer waiting", info, err)
	}
	if _, err := m.TryRLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a reader behind a writer's intent: %v, want ErrNotAcquired", err)
	}
	r2, err := m.RLock(ctx, distlock.WithWait(3*driver.WriteIntentTTL))
	if err != nil {
		t.Fatalf("a reader behind an intent nobody renews: %v", err)
	}
	if took := time.Since(recorded); took < driver.WriteIntentTTL {
		t.Errorf("the intent stopped keeping readers out after %v, before its %v", took, driver.WriteIntentTTL)
	}
	if info, err := m.Inspect(ctx); err != nil || info.WritersWaiting != 0 || len(info.Held) != 2 {
		t.Errorf("Inspect after the intent expired: %+v, %v; want two readers and no writer waiting", info, err)
	}
	for _, l := range []*distlock.Lock{r, r2} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRWLockLeavesNothing takes and releases read and write holds, with a
// writer waiting meanwhile, and checks that the lock's parent is deleted
// once its queue is empty and that List shows no read-write lock.
func TestRWLockLeavesNothing(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := distlock.New(dial(t, srv.Addr(), root))
	defer c.Close()
	const name = "tidy"
	m, err := c.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lock(ctx, distlock.WithWait(200*time.Millisecond)); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a writer's wait behind a reader: %v, want ErrNotAcquired", err)
	}
	if list, err := c.List(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("List with a read-write lock held: %+v, %v; want nothing", list, err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the empty parent is deleted", func() bool {
		ok, _, err := conn.Exists(rwPathOf(root, name))
		return err == nil && !ok
	})
}
