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
