package mysqllock_test

import (
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/mysqllock"
	"github.com/distlock/distlock/internal/testserver"
)

// listPageReadsKeyIndex: ListPage's statement reads a range of the index of
// the holder rows' keys, in the order of the page, with no sort; and
// another client's holds come in byte order, pages of 3 at a time.
func listPageReadsKeyIndex(t *testing.T, s *testserver.Server, admin *sql.DB) {
	ctx := testContext(t, time.Minute)
	holder := distlock.New(newBackend(t, openDB(t, s, 8)))
	defer holder.Close()
	lister := distlock.New(newBackend(t, openDB(t, s, 2)))
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
	var got []string
	for after := ""; ; {
		infos, err := lister.ListPage(ctx, prefix, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			got = append(got, strings.TrimPrefix(in.Key, prefix))
		}
		if len(infos) < 3 {
			break
		}
		after = infos[len(infos)-1].Key
	}
	if !slices.Equal(got, names) {
		t.Fatalf("ListPage in pages of 3: %q, want %q", got, names)
	}

	// admin interpolates the arguments, so EXPLAIN sees them.
	rows, err := admin.QueryContext(ctx, "EXPLAIN "+mysqllock.ListPageSQL,
		prefix+"a", prefix, strings.TrimSuffix(prefix, "/")+"0", prefix, prefix, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			plan.WriteString(cols[i] + "=" + v.String + "\t")
		}
		plan.WriteString("\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("the plan of a page:\n%s", plan.String())
	if p := plan.String(); !strings.Contains(p, "key=distlock_mysql_locks_key\t") || strings.Contains(p, "filesort") {
		t.Fatalf("the plan of a page:\n%s\nwant it to read the index distlock_mysql_locks_key, without a filesort", p)
	}
}
