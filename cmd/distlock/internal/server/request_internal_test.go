package server

import (
	"strconv"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// One tenant's requests to release cannot push another tenant's out of the
// server's memory: a tenant past its share drops its own oldest, and a
// request made again counts once.
func TestPendingRequestsPerTenant(t *testing.T) {
	var p pendingRequests
	now := time.Now()
	held := distlock.Info{Held: true, Fence: 7, TTL: time.Hour}
	p.add(storeKey("victim", "job"), held, "deploy", now)
	for i := range maxPendingRequests + 10 {
		p.add(storeKey("hostile", strconv.Itoa(i)), held, "spam", now.Add(time.Duration(i+1)))
	}
	if _, ok := p.pending(storeKey("victim", "job"), now); !ok {
		t.Fatal("another tenant's requests pushed the victim's request out")
	}
	if n := p.kept("hostile"); n != maxPendingRequestsPerTenant {
		t.Fatalf("the hostile tenant keeps %d requests, want its share, %d", n, maxPendingRequestsPerTenant)
	}
	last := storeKey("hostile", strconv.Itoa(maxPendingRequests+9))
	if _, ok := p.pending(last, now); !ok {
		t.Fatal("the newest request was dropped, not the oldest")
	}
	if _, ok := p.pending(storeKey("hostile", "0"), now); ok {
		t.Fatal("the oldest request past the share is still kept")
	}
	for range 3 {
		p.add(storeKey("victim", "job"), held, "deploy again", now)
	}
	if n := p.kept("victim"); n != 1 {
		t.Fatalf("a request made three times is kept %d times", n)
	}
	p.told(storeKey("victim", "job"), held.Fence)
	if n := p.kept("victim"); n != 0 || p.count != maxPendingRequestsPerTenant {
		t.Fatalf("after the holder was told: victim keeps %d, %d in all; want 0 and %d", n, p.count, maxPendingRequestsPerTenant)
	}
}
