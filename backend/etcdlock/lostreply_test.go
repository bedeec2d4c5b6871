package etcdlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// namespace is an etcd namespace of a test and an admin client of its etcd.
type namespace struct {
	cli    *clientv3.Client
	prefix string
}

// twoBackends returns two backends on one namespace of a new etcd, as two
// instances of a lock service would be, and a context for the test.
func twoBackends(t *testing.T) (namespace, *etcdlock.Backend, *etcdlock.Backend, context.Context) {
	t.Helper()
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	ns := namespace{cli: admin(t, eps), prefix: uniquePrefix(t)}
	first, again := dial(t, eps, ns.prefix), dial(t, eps, ns.prefix)
	t.Cleanup(func() { _, _ = first.Close(), again.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ns, first, again, ctx
}

// TestRetryAfterLostReply: an acquisition whose reply was lost (a lock
// service's call cut short) is sent again by the same token, here through
// another backend, which did not see the grant: it is granted again with
// the grant's fence and renews the hold, rather than refused while its own
// hold lives, which kept a lock service's client waiting for its own lock
// for a whole lease. Another token is still refused.
func TestRetryAfterLostReply(t *testing.T) {
	_, first, again, ctx := twoBackends(t)
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
	ns, first, again, ctx := twoBackends(t)
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
	if keys := storeKeys(t, ns.cli, ns.prefix, "\x00rw\x00rw\x00"); len(keys) != 1 {
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

// TestPermitRetryAfterLostReply: an attempt for permits whose reply was
// lost (a lock service's call cut by the end of its wait) is sent again
// by the same token, here through another backend, which did not see the
// grant: it is granted again with the grant's fence, and no second entry
// of the token stays to count against it. Before, the retry put a second
// entry behind the first, counted the first as another's 3 permits of 3,
// and was refused until the first entry's lease ran out: a waiting
// client stood still for its whole lease though it held the permits.
func TestPermitRetryAfterLostReply(t *testing.T) {
	ns, first, again, ctx := twoBackends(t)
	req := driver.AcquireRequest{Key: "s", Token: fmt.Sprintf("%032x", 7), TTL: 10 * time.Second, Intent: "big", Permits: 3}
	g, err := first.AcquirePermits(ctx, req, 3)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := again.AcquirePermits(ctx, req, 3)
	if err != nil {
		t.Fatalf("the same token again, on another backend: %v, want its grant again", err)
	}
	if g2.Fence != g.Fence {
		t.Errorf("granted again with fence %d, want the grant's %d", g2.Fence, g.Fence)
	}
	var entries []string
	for _, k := range semKeys(t, ns.cli, ns.prefix, "s") {
		if !strings.Contains(k, "%00i") && !strings.HasSuffix(k, "limit") {
			entries = append(entries, k)
		}
	}
	if len(entries) != 1 {
		t.Fatalf("entries after the retry: %q, want the grant's alone", entries)
	}
	if err := again.ReleasePermit(ctx, "s", req.Token); err != nil {
		t.Fatalf("release through the backend that granted it again: %v", err)
	}
	other := driver.AcquireRequest{Key: "s", Token: fmt.Sprintf("%032x", 8), TTL: 10 * time.Second, Permits: 3}
	if _, err := first.AcquirePermits(ctx, other, 3); err != nil {
		t.Fatalf("all 3 permits once released: %v", err)
	}
}
