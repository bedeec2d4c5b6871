package sqllock_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/sqllock"
)

// The same code on PostgreSQL and MariaDB: only the driver and the dialect
// change. Migrate once, at deployment or start-up.
func ExampleNew() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app@tcp(localhost:3306)/app") // or sql.Open("pgx", dsn) with sqllock.Postgres
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	b, err := sqllock.New(db, sqllock.MariaDB) // an invalid option is an error here
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	client := distlock.New(b)
	defer client.Close()

	err = client.Do(ctx, "invoice:7", func(ctx context.Context, l *distlock.Lock) error {
		fmt.Println("sending invoice 7 under fence", l.Fence())
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
}
