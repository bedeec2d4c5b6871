// Command orders is the multi-layer defence a payments team deploys against
// charging an order twice: a lock so that replicas do not do the work twice,
// the lock's fence checked by the database write, a unique constraint on the
// business id, and the order's state machine updated optimistically (occ).
// See Service.Process.
//
//	go run ./examples/orders -store redis://127.0.0.1:6379/0 -db postgres://postgres@127.0.0.1/postgres
//
// It creates the tables, adds a few pending orders, runs three replicas over
// them at once and prints who charged what: every order exactly once.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/backend/etcdlock"
	_ "github.com/distlock/distlock/backend/pglock"
	_ "github.com/distlock/distlock/backend/redislock"
	_ "github.com/distlock/distlock/backend/zklock"
)

func main() {
	store := flag.String("store", "redis://127.0.0.1:6379/0", "lock store URL (any distlock.Open accepts)")
	dsn := flag.String("db", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL DSN of the orders database")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, *store, *dsn, []string{"o-1", "o-2", "o-3"}); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, store, dsn string, orders []string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, Schema); err != nil {
		return err
	}
	for _, id := range orders {
		if _, err := db.ExecContext(ctx, `INSERT INTO orders (id, amount) VALUES ($1, 1000) ON CONFLICT DO NOTHING`, id); err != nil {
			return err
		}
	}
	locks, err := distlock.Open(ctx, store)
	if err != nil {
		return err
	}
	defer locks.Close()
	var wg sync.WaitGroup
	for r := range 3 {
		s := &Service{Replica: fmt.Sprintf("replica-%d", r), Locks: locks, DB: db}
		wg.Go(func() {
			for _, id := range orders {
				fmt.Printf("%s %s: %v\n", s.Replica, id, s.Process(ctx, id))
			}
		})
	}
	wg.Wait()
	rows, err := db.QueryContext(ctx, `SELECT order_id, replica FROM charges ORDER BY order_id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, replica string
		if err := rows.Scan(&id, &replica); err != nil {
			return err
		}
		fmt.Printf("%s charged once, by %s\n", id, replica)
	}
	return rows.Err()
}
