package sqllock_test

import (
	"database/sql"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/internal/sqltest"
)

// listPageInByteOrder: ListPage orders keys byte for byte where the
// database's collation orders them otherwise (PostgreSQL: an ICU collation
// of en-US, where "a" comes before "B" and "é" before "z"), and its
// statement reads an index in that order, with no sort: a page costs about
// a page of rows.
func listPageInByteOrder(t *testing.T, st store) {
	ctx := testContext(t, time.Minute)
	if st.dialect == sqllock.Postgres {
		db, err := sql.Open(st.driver, st.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, `CREATE DATABASE linguistic TEMPLATE template0 ENCODING 'UTF8'
			LOCALE 'C.UTF-8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'`); err != nil {
			t.Fatal(err)
		}
		st.dsn = strings.Replace(st.dsn, "/postgres?", "/linguistic?", 1)
	}
	b := st.open(t)
	if err := b.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c := distlock.New(b)
	defer c.Close()
	prefix := uniqueKey(t) + "/"
	names := []string{"B", "a", "z", "é"} // in byte order
	for _, n := range []string{"z", "a", "é", "B"} {
		l, err := c.TryLock(ctx, prefix+n)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
	}
	var byCollation []string
	rows, err := b.DB().QueryContext(ctx, st.sql("SELECT lock_key FROM distlock_leases WHERE lock_key LIKE ? ORDER BY lock_key"), prefix+"%")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		byCollation = append(byCollation, strings.TrimPrefix(string(k), prefix))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if st.dialect == sqllock.Postgres && slices.Equal(byCollation, names) {
		t.Fatalf("the database orders keys %q, byte for byte: it cannot tell a byte order from another", byCollation)
	}
	got := sqltest.PageKeys(ctx, t, c, prefix, 3)
	if !slices.Equal(got, names) {
		t.Fatalf("ListPage in pages of 3: %q, want %q (the database's collation orders them %q)", got, names, byCollation)
	}

	// The plan of the statement, with its arguments written in (all ASCII).
	// PostgreSQL prefers a sort of a small table's rows to reading its index
	// in order: it is told to sort and to read a table whole only where no
	// index serves, so that the plan shows whether one does.
	q, err := os.ReadFile("sql/" + st.dialect.Name() + "/list_page.sql")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"'" + prefix + "a'", "'" + prefix + "'", "'" + strings.TrimSuffix(prefix, "/") + "0'", "'" + prefix + "'", "'" + prefix + "'", "3"}
	var text string
	for line := range strings.Lines(string(q)) {
		if !strings.HasPrefix(line, "--") {
			text += line
		}
	}
	for i, a := range args {
		if st.dialect == sqllock.Postgres {
			text = strings.Replace(text, "$"+strconv.Itoa(i+1), a, 1)
		} else {
			text = strings.Replace(text, "?", a, 1)
		}
	}
	conn, err := b.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if st.dialect == sqllock.Postgres {
		for _, set := range []string{"enable_seqscan", "enable_bitmapscan", "enable_sort"} {
			if _, err := conn.ExecContext(ctx, "SET "+set+" = off"); err != nil {
				t.Fatal(err)
			}
		}
	}
	plan := sqltest.Rows(ctx, t, conn, "EXPLAIN "+text)
	want := "Index Scan using distlock_leases_key_bytes"
	if st.dialect != sqllock.Postgres {
		want = "PRIMARY"
	}
	t.Logf("the plan of a page:\n%s", plan)
	if !strings.Contains(plan, want) || strings.Contains(strings.ToLower(plan), "sort") {
		t.Fatalf("the plan of a page:\n%s\nwant it to read %q, without a sort", plan, want)
	}
}
