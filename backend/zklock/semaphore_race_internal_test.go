package zklock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// TestSingleAttemptBehindAClaimedIntent: a single attempt's node queued
// behind a waiting request's intent, listed while the intent was there,
// must not hold once that request has claimed its permits behind it:
// the intent it finds gone became a hold its listing does not show. With
// one permit, holding would make two holders.
func TestSingleAttemptBehindAClaimedIntent(t *testing.T) {
	srv := testserver.Shared(t, "zookeeper", testserver.ZooKeeper) // see zkServer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, events, err := zk.Connect([]string{srv.Addr()}, 4*time.Second, zk.WithLogger(quietLog{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, err := New(conn, events, WithRoot(fmt.Sprintf("/test-claimed-intent-%d", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const key = "one-permit"
	req := func(token, intent string) driver.AcquireRequest {
		return driver.AcquireRequest{Key: key, Token: token, TTL: time.Minute, Intent: intent, Permits: 1}
	}
	first := req("00000000000000000000000000000001", "")
	if _, err := b.AcquirePermits(ctx, first, 1); err != nil {
		t.Fatal(err)
	}
	waiting := req("00000000000000000000000000000002", "waiting-request")
	if _, err := b.AcquirePermits(ctx, waiting, 1); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a waiting request beside the holder: %v, want ErrNotAcquired", err)
	}

	// A single attempt creates its node behind the intent and lists the
	// queue: the holder, the intent, itself.
	st, err := b.state()
	if err != nil {
		t.Fatal(err)
	}
	sp := b.semPath(key)
	lim, err := b.readLimit(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	single := value{Token: "00000000000000000000000000000003", TTLMs: time.Minute.Milliseconds()}
	pos, _, err := b.createPermit(ctx, sp, lim, nodeName(single.Token), single.encode())
	if err != nil {
		t.Fatal(err)
	}
	defer b.leave(pos.node)
	if err := b.list(ctx, &pos); err != nil {
		t.Fatal(err)
	}
	if len(pos.queue) != 3 || pos.idx != 2 || !parseSemNode(pos.queue[1]).intent {
		t.Fatalf("the queue: %q (the attempt at %d), want the holder, the intent and the attempt", pos.queue, pos.idx)
	}

	// Before it decides, the holder leaves and the waiting request claims
	// the permit behind it.
	if err := b.ReleasePermit(ctx, key, first.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquirePermits(ctx, waiting, 1); err != nil {
		t.Fatalf("the waiting request once the permit is free: %v", err)
	}
	defer b.ReleasePermit(ctx, key, waiting.Token)

	f, err := b.fitListed(ctx, st, &pos, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if f.ok {
		t.Fatal("the single attempt holds beside the waiting request's hold: two holders of one permit")
	}
}
