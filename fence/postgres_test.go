package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/occ"
)

// TestPausedHolderRejected is the case fencing exists for, on a real
// PostgreSQL: holder A stops renewing (as a paused process would) past its
// lease, B takes the lock and writes, then A wakes up and writes. The row
// must reject A and keep B's data.
func TestPausedHolderRejected(t *testing.T) {
	s := testserver.Postgres(t)
	dsn := testserver.PostgresDSN(s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (
		id bigint PRIMARY KEY, writer text NOT NULL, balance bigint NOT NULL, last_fence bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	backends := map[string]func(t *testing.T) driver.Backend{
		"pglock": func(t *testing.T) driver.Backend {
			b, err := pglock.Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		"sqllock": func(t *testing.T) driver.Backend {
			b, err := sqllock.OpenDSN(ctx, "pgx", dsn, sqllock.Postgres)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			return b
		},
	}
	id := 0
	for name, newBackend := range backends {
		id++
		t.Run(name, func(t *testing.T) { pausedHolder(t, ctx, db, int64(id), newBackend) })
	}
}

func pausedHolder(t *testing.T, ctx context.Context, db *sql.DB, id int64, newBackend func(*testing.T) driver.Backend) {
	if _, err := db.ExecContext(ctx, "INSERT INTO accounts VALUES ($1, '', 0, 0)", id); err != nil {
		t.Fatal(err)
	}
	a, b := distlock.New(newBackend(t)), distlock.New(newBackend(t))
	defer a.Close()
	defer b.Close()
	key := fmt.Sprintf("fence/%s/%d", t.Name(), time.Now().UnixNano())
	write := func(l *distlock.Lock, who string) error {
		return fence.Write(ctx, occ.SQL(db),
			"UPDATE accounts SET writer = $3, balance = balance + 1, last_fence = $2 WHERE id = $1 AND last_fence <= $2",
			id, int64(l.Fence()), who)
	}

	la, err := a.Lock(ctx, key, distlock.WithLease(300*time.Millisecond)) // no renewal
	if err != nil {
		t.Fatal(err)
	}
	if err := write(la, "A"); err != nil {
		t.Fatalf("A's write while holding: %v", err)
	}
	<-la.Done() // A is "paused": it does nothing while its lease runs out
	lb, err := b.Lock(ctx, key, distlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(ctx)
	if err := write(lb, "B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if err := write(la, "A"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("A's write after waking up: %v, want ErrStale", err)
	}
	var (
		writer             string
		balance, lastFence int64
	)
	if err := db.QueryRowContext(ctx, "SELECT writer, balance, last_fence FROM accounts WHERE id = $1", id).Scan(&writer, &balance, &lastFence); err != nil {
		t.Fatal(err)
	}
	if writer != "B" || balance != 2 || lastFence != int64(lb.Fence()) {
		t.Fatalf("row = writer %s, balance %d, fence %d; want B's data: B, 2, %d", writer, balance, lastFence, lb.Fence())
	}
}
