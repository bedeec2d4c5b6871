package pglock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
)

// A lock pins one pool connection while held: size the pool for the locks
// held at once.
func ExampleOpen() {
	ctx := context.Background()
	b, err := pglock.Open(ctx, "postgres://app@localhost/app?pool_max_conns=20")
	if err != nil {
		fmt.Println(err)
		return
	}
	client := distlock.New(b)
	defer client.Close()

	l, err := client.Lock(ctx, "nightly-report", distlock.WithWait(time.Minute))
	if err != nil {
		fmt.Println("another replica runs the report:", err)
		return
	}
	defer l.Release(ctx)
	fmt.Println("running the report under fence", l.Fence())
}

// A transaction-level lock for code that already runs in a pgx transaction:
// commit or rollback releases it. It maps the key as the backend's locks do.
func ExampleBackend_XactLock() {
	ctx := context.Background()
	var pool *pgxpool.Pool // pgxpool.New(ctx, dsn)
	b, err := pglock.New(pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := b.XactLock(ctx, tx, "account:7"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 7")
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
}
