package mysqllock_test

import (
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/mysqllock"
	"github.com/distlock/distlock/internal/sqltest"
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
	got := sqltest.PageKeys(ctx, t, lister, prefix, 3)
	if !slices.Equal(got, names) {
		t.Fatalf("ListPage in pages of 3: %q, want %q", got, names)
	}

	// admin interpolates the arguments, so EXPLAIN sees them.
	plan := sqltest.Rows(ctx, t, admin, "EXPLAIN "+mysqllock.ListPageSQL,
		prefix+"a", prefix, strings.TrimSuffix(prefix, "/")+"0", prefix, prefix, 3)
	t.Logf("the plan of a page:\n%s", plan)
	if !strings.Contains(plan, "key=distlock_mysql_locks_key\t") || strings.Contains(plan, "filesort") {
		t.Fatalf("the plan of a page:\n%s\nwant it to read the index distlock_mysql_locks_key, without a filesort", plan)
	}
}
