package occ_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/occ"
)

func TestPostgres(t *testing.T) {
	s := testserver.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", testserver.PostgresDSN(s))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pool, err := pgxpool.New(ctx, testserver.PostgresDSN(s)+"&pool_max_conns=16")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (
		id bigint PRIMARY KEY, status text NOT NULL, counter bigint NOT NULL, version bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	// Half the writers go through database/sql, half through pgx.
	updaters := []occ.Updater{occ.SQL(db), occ.Pgx(pool.Exec)}

	t.Run("NoLostUpdate", func(t *testing.T) { noLostUpdate(t, ctx, db, updaters) })
	t.Run("OneOrderShippedOnce", func(t *testing.T) { shippedOnce(t, ctx, db, updaters) })
}

// noLostUpdate runs 32 writers that each add one to a counter 5 times by
// read, compute, versioned write: the counter and the version both end at the
// number of successful writes.
func noLostUpdate(t *testing.T, ctx context.Context, db *sql.DB, updaters []occ.Updater) {
	const writers, rounds = 32, 5
	if _, err := db.ExecContext(ctx, "INSERT INTO orders VALUES (1, 'new', 0, 0)"); err != nil {
		t.Fatal(err)
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		successes int64
		gaveUp    int
		errs      []error
	)
	p := occ.Policy{MaxAttempts: 200, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}
	for w := range writers {
		u := updaters[w%len(updaters)]
		wg.Go(func() {
			for range rounds {
				err := occ.Retry(ctx, p, func(ctx context.Context) error {
					var counter, version int64
					if err := db.QueryRowContext(ctx, "SELECT counter, version FROM orders WHERE id = 1").Scan(&counter, &version); err != nil {
						return err
					}
					return occ.UpdateVersion(ctx, u, "UPDATE orders SET counter = $3, version = version + 1 WHERE id = $1 AND version = $2", 1, version, counter+1)
				})
				mu.Lock()
				switch {
				case err == nil:
					successes++
				case errors.Is(err, occ.ErrConflict):
					gaveUp++
				default:
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	var counter, version int64
	if err := db.QueryRowContext(ctx, "SELECT counter, version FROM orders WHERE id = 1").Scan(&counter, &version); err != nil {
		t.Fatal(err)
	}
	if counter != successes || version != successes {
		t.Fatalf("counter %d, version %d after %d successful updates (%d gave up): an update was lost", counter, version, successes, gaveUp)
	}
	if successes == 0 {
		t.Fatal("no update succeeded")
	}
	t.Logf("%d successful updates, %d gave up after %d attempts", successes, gaveUp, p.MaxAttempts)
}

// shippedOnce has 32 workers read a paid order at the same version, then all
// ship it: exactly one changes the row, the others get ErrConflict and
// change nothing.
func shippedOnce(t *testing.T, ctx context.Context, db *sql.DB, updaters []occ.Updater) {
	const workers = 32
	if _, err := db.ExecContext(ctx, "INSERT INTO orders VALUES (2, 'paid', 0, 7)"); err != nil {
		t.Fatal(err)
	}
	var version int64
	if err := db.QueryRowContext(ctx, "SELECT version FROM orders WHERE id = 2").Scan(&version); err != nil {
		t.Fatal(err)
	}
	results := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			results[w] = occ.UpdateVersion(ctx, updaters[w%len(updaters)],
				"UPDATE orders SET status = 'shipped', counter = $3, version = version + 1 WHERE id = $1 AND version = $2", 2, version, w)
		})
	}
	wg.Wait()
	winner := -1
	for w, err := range results {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("workers %d and %d both shipped the order", winner, w)
		case err == nil:
			winner = w
		case !errors.Is(err, occ.ErrConflict):
			t.Fatalf("worker %d: %v, want nil or ErrConflict", w, err)
		}
	}
	if winner < 0 {
		t.Fatal("nobody shipped the order")
	}
	var status string
	var shipper, after int64
	if err := db.QueryRowContext(ctx, "SELECT status, counter, version FROM orders WHERE id = 2").Scan(&status, &shipper, &after); err != nil {
		t.Fatal(err)
	}
	if status != "shipped" || shipper != int64(winner) || after != version+1 {
		t.Fatalf("row = %s by %d at version %d, want shipped by %d at version %d", status, shipper, after, winner, version+1)
	}
	// A statement that is not keyed to one row is refused loudly.
	if err := occ.UpdateVersion(ctx, occ.SQL(db), "UPDATE orders SET version = version + 1 WHERE version >= $1", 0); err == nil || errors.Is(err, occ.ErrConflict) {
		t.Fatalf("an update of several rows: %v, want an error that is not a conflict", err)
	}
}
