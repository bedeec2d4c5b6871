package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/idem"
	"github.com/distlock/distlock/idem/idemtest"
	"github.com/distlock/distlock/idem/pgstore"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/occ"
)

func TestMain(m *testing.M) {
	if code, child := idemtest.RunChild(func(ctx context.Context, dsn string) (*idem.Keeper, func(), error) {
		k, _, _, closeAll, err := newKeeper(ctx, dsn)
		return k, closeAll, err
	}); child {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

// newKeeper returns a Keeper whose locks (pglock) and records are both in the
// PostgreSQL at dsn, with lease idemtest.Lease renewed while fn runs.
func newKeeper(ctx context.Context, dsn string) (*idem.Keeper, *pgstore.Store, *pgxpool.Pool, func(), error) {
	pool, err := pgxpool.New(ctx, dsn+"&pool_max_conns=40")
	if err != nil {
		return nil, nil, nil, nil, err
	}
	b, err := pglock.New(pool)
	if err != nil {
		pool.Close()
		return nil, nil, nil, nil, err
	}
	c := distlock.New(b)
	closeAll := func() { _ = c.Close(); pool.Close() }
	s, err := pgstore.New(pool)
	if err == nil {
		err = s.Migrate(ctx)
	}
	var k *idem.Keeper
	if err == nil {
		k, err = idem.New(c, s, idem.WithLockOptions(distlock.WithLease(idemtest.Lease), distlock.WithWatchdog(true)))
	}
	if err != nil {
		closeAll()
		return nil, nil, nil, nil, err
	}
	return k, s, pool, closeAll, nil
}

func setup(t *testing.T) (dsn string, k *idem.Keeper, s *pgstore.Store, pool *pgxpool.Pool) {
	t.Helper()
	dsn = testserver.PostgresDSN(testserver.Postgres(t))
	k, s, pool, closeAll, err := newKeeper(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	return dsn, k, s, pool
}

func TestSuite(t *testing.T) {
	_, k, s, _ := setup(t)
	idemtest.Run(t, k, s)
}

func TestProcessDuplicates(t *testing.T) {
	dsn, _, _, _ := setup(t)
	idemtest.ProcessDuplicates(t, dsn, "procdup")
}

func TestKilledAttempt(t *testing.T) {
	dsn, k, _, pool := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id int PRIMARY KEY, balance text NOT NULL, last_fence numeric(20) NOT NULL);
		INSERT INTO accounts VALUES (1, 'initial', 0)`); err != nil {
		t.Fatal(err)
	}
	write := func(balance string, f uint64) error {
		return fence.Write(ctx, occ.Pgx(pool.Exec),
			`UPDATE accounts SET balance = $3, last_fence = $2 WHERE id = $1 AND last_fence <= $2`, 1, f, balance)
	}
	dead := idemtest.KillMidRun(t, dsn, "killed")
	start := time.Now()
	r, err := k.Do(ctx, "killed", []byte("request"), func(ctx context.Context, f uint64) ([]byte, error) {
		return []byte("retried"), write("retried", f)
	})
	if err != nil || r.Replayed || r.Fence <= dead {
		t.Fatalf("retry: %+v, %v; want a fresh run with a fence above the killed attempt's %d", r, err, dead)
	}
	if waited := time.Since(start); waited < idemtest.Lease/2 {
		t.Logf("retry ran after %v: the store ended the killed attempt's session before its lease %v", waited, idemtest.Lease)
	}
	if err := write("late", dead); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the killed attempt's late write under its old fence: %v, want fence.ErrStale", err)
	}
	var balance string
	if err := pool.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = 1`).Scan(&balance); err != nil || balance != "retried" {
		t.Fatalf("balance %q, %v; want retried", balance, err)
	}
}

func TestDoTx(t *testing.T) {
	_, k, s, pool := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	// state reports whether the order row and the record of key exist.
	state := func(t *testing.T, key string) (order, record bool) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM orders WHERE id = $1)`, key).Scan(&order); err != nil {
			t.Fatal(err)
		}
		_, record, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return order, record
	}
	doTx := func(t *testing.T, key string, fn pgstore.TxFunc) (idem.Result, error) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s.DoTx(ctx, k, tx, key, []byte("order"), fn)
	}
	insert := func(ctx context.Context, tx pgx.Tx, key string) error {
		_, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1)`, key)
		return err
	}

	t.Run("Commit", func(t *testing.T) {
		r, err := doTx(t, "a", func(ctx context.Context, tx pgx.Tx, _ uint64) ([]byte, error) {
			return []byte("placed"), insert(ctx, tx, "a")
		})
		if err != nil || string(r.Value) != "placed" {
			t.Fatalf("%+v, %v", r, err)
		}
		if order, record := state(t, "a"); !order || !record {
			t.Fatalf("order %v, record %v; want both", order, record)
		}
		ran := false
		r, err = doTx(t, "a", func(context.Context, pgx.Tx, uint64) ([]byte, error) { ran = true; return nil, nil })
		if err != nil || !r.Replayed || ran || string(r.Value) != "placed" {
			t.Fatalf("duplicate: %+v, %v, ran %v; want a replay", r, err, ran)
		}
	})
	t.Run("Rollback", func(t *testing.T) {
		busy := errors.New("upstream busy")
		_, err := doTx(t, "b", func(ctx context.Context, tx pgx.Tx, _ uint64) ([]byte, error) {
			if err := insert(ctx, tx, "b"); err != nil {
				return nil, err
			}
			return nil, busy
		})
		if !errors.Is(err, busy) {
			t.Fatalf("err %v, want %v", err, busy)
		}
		if order, record := state(t, "b"); order || record {
			t.Fatalf("order %v, record %v; want neither", order, record)
		}
	})
	t.Run("Superseded", func(t *testing.T) {
		_, err := doTx(t, "c", func(ctx context.Context, tx pgx.Tx, f uint64) ([]byte, error) {
			if err := insert(ctx, tx, "c"); err != nil {
				return nil, err
			}
			// Another attempt, which a lost lock let run, records its result
			// while this one still runs.
			if ok, err := s.Put(ctx, "c", idem.Record{Value: []byte("later"), Fence: f + 1}, time.Minute); !ok || err != nil {
				return nil, errors.Join(errors.New("later record refused"), err)
			}
			return []byte("placed"), nil
		})
		if !errors.Is(err, idem.ErrSuperseded) {
			t.Fatalf("err %v, want ErrSuperseded", err)
		}
		if order, _ := state(t, "c"); order {
			t.Fatal("the superseded attempt's order row was committed")
		}
	})
}

func TestOptions(t *testing.T) {
	if _, err := pgstore.New(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("nil pool: %v", err)
	}
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/x")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, o := range []pgstore.Option{pgstore.WithRequestTimeout(0), pgstore.WithTable("x; DROP TABLE y")} {
		if _, err := pgstore.New(pool, o); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Fatalf("bad option: %v", err)
		}
	}
}

// TestMigrateConcurrently: replicas that start at once (a job run by cron
// on every one) each migrate the table on first use; PostgreSQL's CREATE
// TABLE IF NOT EXISTS is not atomic, and every one of them must still
// succeed.
func TestMigrateConcurrently(t *testing.T) {
	_, _, _, pool := setup(t)
	ctx := context.Background()
	for round := range 5 {
		table := fmt.Sprintf("idem_concurrent_%d", round)
		errs := make(chan error, 8)
		for range cap(errs) {
			go func() {
				s, err := pgstore.New(pool, pgstore.WithTable(table))
				if err == nil {
					err = s.Migrate(ctx)
				}
				errs <- err
			}()
		}
		for range cap(errs) {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: concurrent Migrate: %v", round, err)
			}
		}
	}
}

func TestOpenURL(t *testing.T) {
	idemtest.RunURL(t, testserver.PostgresDSN(testserver.Postgres(t)))
}
