package main

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const lease = 500 * time.Millisecond

func setup(t *testing.T, lockURL string) (*sql.DB, *distlock.Client, *distlock.Client) {
	pg := testserver.Postgres(t)
	db, err := sql.Open("pgx", testserver.PostgresDSN(pg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, Schema+`INSERT INTO orders (id, amount) VALUES ('o-1', 1000);`); err != nil {
		t.Fatal(err)
	}
	var clients [2]*distlock.Client
	for i := range clients {
		c, err := distlock.Open(ctx, lockURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	return db, clients[0], clients[1]
}

// raceCharge lets replica a stop right before its charge, runs fault, lets b
// process the order until it is no longer busy, then lets a go on: the
// order must be charged once, by b, and a must be refused.
func raceCharge(t *testing.T, db *sql.DB, la, lb *distlock.Client, fault func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	paused, resume := make(chan struct{}), make(chan struct{})
	a := &Service{Replica: "a", Locks: la, DB: db, Lease: lease, BeforeCharge: func() {
		close(paused)
		select { // the pause: a stays here, its lock running out, until released
		case <-resume:
		case <-time.After(20 * time.Second):
		}
	}}
	b := &Service{Replica: "b", Locks: lb, DB: db, Lease: lease}
	aDone := make(chan error, 1)
	go func() { aDone <- a.Process(ctx, "o-1") }()
	select {
	case <-paused:
	case err := <-aDone:
		t.Fatalf("a did not reach its charge: %v", err)
	}
	fault()
	var bErr error
	deadline := time.Now().Add(15 * time.Second)
	for {
		// b retries as a replica's job queue would: while a holds the order,
		// while the store is down, and when b's own lock was lost before it
		// wrote anything (a grant that landed on the old primary of a
		// failover and went with it).
		bErr = b.Process(ctx, "o-1")
		if !errors.Is(bErr, ErrBusy) && !errors.Is(bErr, ErrStale) && !isStoreDown(bErr) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(resume)
	aErr := <-aDone
	if bErr != nil {
		t.Fatalf("b: %v", bErr)
	}
	if !errors.Is(aErr, ErrStale) && !errors.Is(aErr, ErrCharged) {
		t.Errorf("a after its pause: %v, want ErrStale or ErrCharged", aErr)
	}
	var n int
	var by string
	if err := db.QueryRowContext(ctx, `SELECT count(*), min(replica) FROM charges WHERE order_id = 'o-1'`).Scan(&n, &by); err != nil {
		t.Fatal(err)
	}
	if n != 1 || by != "b" {
		t.Fatalf("order charged %d times (by %s), want once by b", n, by)
	}
	t.Logf("a: %v", aErr)
}

func isStoreDown(err error) bool {
	return err != nil && !errors.Is(err, ErrBusy) && !errors.Is(err, ErrStale) && !errors.Is(err, ErrCharged)
}

// A replica paused past its lease between deciding to charge and charging.
func TestChargedOnceUnderPause(t *testing.T) {
	r := testserver.Redis(t)
	db, la, lb := setup(t, "redis://"+r.Addr()+"/0")
	raceCharge(t, db, la, lb, func() {})
}

// A replica holds the lock when the Redis primary fails over to a replica
// that never received the lock (nor the fence counter): the worst a
// failover can do, forced by emptying the new primary.
func TestChargedOnceUnderFailover(t *testing.T) {
	set := testserver.RedisSentinel(t)
	addrs := set.SentinelAddrs()
	db, la, lb := setup(t, "redis-sentinel://"+addrs[0]+"/"+testserver.SentinelMaster+"?addr="+strings.Join(addrs[1:], "&addr="))
	raceCharge(t, db, la, lb, func() {
		primary := set.Failover(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := testserver.RedisCommand(ctx, primary.Addr(), "FLUSHALL"); err != nil {
			t.Fatal(err)
		}
	})
}
