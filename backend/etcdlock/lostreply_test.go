package etcdlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// TestRetryAfterLostReply: an acquisition whose reply was lost (a lock
// service's call cut short) is sent again by the same token, here through
// another backend, which did not see the grant: it is granted again with
// the grant's fence and renews the hold, rather than refused while its own
// hold lives, which kept a lock service's client waiting for its own lock
// for a whole lease. Another token is still refused.
func TestRetryAfterLostReply(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	prefix := uniquePrefix(t)
	first, again := dial(t, eps, prefix), dial(t, eps, prefix)
	defer first.Close()
	defer again.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := driver.AcquireRequest{Key: "k", Token: fmt.Sprintf("%032x", 1), TTL: 10 * time.Second}
	g, err := first.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := again.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("the same token again, on another backend: %v, want its grant again", err)
	}
	if g2.Fence != g.Fence {
		t.Errorf("granted again with fence %d, want the grant's %d", g2.Fence, g.Fence)
	}
	other := driver.AcquireRequest{Key: "k", Token: fmt.Sprintf("%032x", 2), TTL: 10 * time.Second}
	if _, err := first.Acquire(ctx, other); err == nil {
		t.Fatal("another token took the key while it is held")
	}
	if err := again.Release(ctx, "k", req.Token); err != nil {
		t.Fatalf("release through the backend that granted it again: %v", err)
	}
	if _, err := first.Acquire(ctx, other); err != nil {
		t.Fatalf("another token once released: %v", err)
	}
}

// TestRWRetryAfterLostReply: a writer's attempt sent again by its token
// after a lost reply, through a backend that did not see the grant, is
// granted again with the grant's fence, and takes its intent away. Before,
// it was refused by its own hold, and recorded an intent that kept
// readers out, for the hold's whole lease.
func TestRWRetryAfterLostReply(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	cli, prefix := admin(t, eps), uniquePrefix(t)
	first, again := dial(t, eps, prefix), dial(t, eps, prefix)
	defer first.Close()
	defer again.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := driver.AcquireRequest{Key: "rw", Token: fmt.Sprintf("%032x", 10), TTL: 10 * time.Second, Intent: "w"}
	g, err := first.AcquireRW(ctx, req, driver.Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := again.AcquireRW(ctx, req, driver.Exclusive)
	if err != nil {
		t.Fatalf("the same token again, on another backend: %v, want its grant again", err)
	}
	if g2.Fence != g.Fence {
		t.Errorf("granted again with fence %d, want the grant's %d", g2.Fence, g.Fence)
	}
	if keys := storeKeys(t, cli, prefix, "\x00rw\x00rw\x00"); len(keys) != 1 {
		t.Fatalf("keys after the retry: %q, want the hold's entry alone (no intent)", keys)
	}
	if err := again.ReleaseRW(ctx, "rw", req.Token); err != nil {
		t.Fatalf("release through the backend that granted it again: %v", err)
	}
	reader := driver.AcquireRequest{Key: "rw", Token: fmt.Sprintf("%032x", 11), TTL: 10 * time.Second}
	if _, err := first.AcquireRW(ctx, reader, driver.Shared); err != nil {
		t.Fatalf("a reader once released: %v", err)
	}
}

// TestRetryOnTheSameBackendClosesPromptly: an acquisition sent again by its
// token through the backend that granted it renews the hold it knows,
// rather than recording a second one: Close then ends the hold's watch
// at once. With a second record the first one's watch ran until the
// hold's lease ended, and Close waited for it.
func TestRetryOnTheSameBackendClosesPromptly(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	b := dial(t, eps, uniquePrefix(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := driver.AcquireRequest{Key: "k", Token: fmt.Sprintf("%032x", 3), TTL: time.Minute}
	g, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the hold's watch starts
	g2, err := b.Acquire(ctx, req)
	if err != nil || g2.Fence != g.Fence {
		t.Fatalf("the same token again: %+v, %v; want fence %d again", g2, err, g.Fence)
	}
	time.Sleep(200 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waiting after 10 s: a hold's watch outlived its record (the hold's lease is a minute)")
	}
}
