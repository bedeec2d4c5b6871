package pglock_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/internal/sqltest"
	"github.com/distlock/distlock/internal/testserver"
)

// listPageInByteOrder: ListPage orders keys byte for byte in a database
// whose collation (ICU's en-US) puts "a" before "B" and "é" before "z", for
// holds of another backend, known from their rows; and its statement reads
// an index of the holder rows in that order, with no sort.
func listPageInByteOrder(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	if _, err := admin.Exec(ctx, `CREATE DATABASE linguistic TEMPLATE template0 ENCODING 'UTF8'
		LOCALE 'C.UTF-8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(strings.Replace(testserver.PostgresDSN(s), "/postgres?", "/linguistic?", 1))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8 // a connection for each of the 4 holds, and for the rest
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	holder := distlock.New(newBackend(t, pool))
	defer holder.Close()
	lister := distlock.New(newBackend(t, pool))
	defer lister.Close()
	prefix := uniqueKey(t) + "/"
	names := []string{"B", "a", "z", "é"} // in byte order
	for _, n := range []string{"z", "a", "é", "B"} {
		l, err := holder.TryLock(ctx, prefix+n)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	rows, _ := pool.Query(ctx, "SELECT lock_key FROM distlock_pg_locks WHERE starts_with(lock_key, $1) ORDER BY lock_key", prefix)
	byCollation, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var k string
		err := r.Scan(&k)
		return strings.TrimPrefix(k, prefix), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(byCollation, names) {
		t.Fatalf("the database orders keys %q, byte for byte: it cannot tell a byte order from another", byCollation)
	}
	got := sqltest.PageKeys(ctx, t, lister, prefix, 3)
	if !slices.Equal(got, names) {
		t.Fatalf("ListPage in pages of 3: %q, want %q (the database's collation orders them %q)", got, names, byCollation)
	}

	// PostgreSQL prefers a sort of a small table's rows to reading its index
	// in order: it is told to sort and to read a table whole only where no
	// index serves, so that the plan shows whether one does.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, set := range []string{"enable_seqscan", "enable_bitmapscan", "enable_sort"} {
		if _, err := conn.Exec(ctx, "SET "+set+" = off"); err != nil {
			t.Fatal(err)
		}
	}
	defer conn.Exec(context.WithoutCancel(ctx), "RESET ALL")
	rows, _ = conn.Query(ctx, "EXPLAIN "+pglock.ListPageSQL, prefix+"a", prefix, strings.TrimSuffix(prefix, "/")+"0", 3)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	t.Logf("the plan of a page:\n%s", plan)
	if !strings.Contains(plan, "Index Scan using distlock_pg_locks_key_bytes") || strings.Contains(plan, "Sort") {
		t.Fatalf("the plan of a page:\n%s\nwant it to read the index distlock_pg_locks_key_bytes, without a sort", plan)
	}
}

// keyIndexWaitsForNoOne: Migrate makes ListPage's key index where it is
// missing, but not behind an acquisition that waits for its advisory lock,
// which holds the holder table for its whole wait: the index would wait for
// the table, and every other acquisition for the index. Migrate returns at
// once without it then, and a later Migrate makes it.
func keyIndexWaitsForNoOne(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	indexed := func() bool {
		t.Helper()
		var ok bool
		if err := admin.QueryRow(ctx, "SELECT to_regclass('distlock_pg_locks_key_bytes') IS NOT NULL").Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	holder := distlock.New(newBackend(t, newPool(t, s, 2)))
	defer holder.Close()
	waiter := distlock.New(newBackend(t, newPool(t, s, 2)))
	defer waiter.Close()
	key := uniqueKey(t)
	l, err := holder.TryLock(ctx, key) // the holder's first call: it migrates
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.Inspect(ctx, key); err != nil { // and the waiter's
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "DROP INDEX distlock_pg_locks_key_bytes"); err != nil { // as before this version
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, key, distlock.WithWait(30*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	for waiting := 0; waiting == 0; time.Sleep(10 * time.Millisecond) {
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").Scan(&waiting); err != nil {
			t.Fatal(err) // also once ctx ends
		}
	}
	migrate := func() {
		t.Helper()
		b := newBackend(t, newPool(t, s, 1))
		defer b.Close()
		if err := b.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	migrate()
	if took := time.Since(start); took > 2*time.Second || indexed() {
		t.Fatalf("Migrate beside a waiting acquisition took %v, index made: %v; want it back at once, without the index", took, indexed())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	migrate()
	if !indexed() {
		t.Fatal("Migrate with no acquisition waiting did not make the index")
	}
}
