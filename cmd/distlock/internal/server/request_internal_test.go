package server

import (
	"strconv"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// One tenant's requests to release cannot push another tenant's out of the
// server's memory.
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
}
