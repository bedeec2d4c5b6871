package mysqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/distlock/distlock/backend/mysqllock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

// BenchmarkShapesFenceRowEngines: the acquisition's own statement
// (sql/acquire.sql, GET_LOCK inside the upsert of the key's row) and the
// release, one goroutine over 64 keys on one connection, no client code,
// with the row in a table of each storage engine, against the raw pair: what
// a fence row that is not InnoDB would gain. MEMORY has no TEXT, so its
// metadata columns are VARCHAR(255) there.
//
//	go test -run '^$' -bench FenceRowEngines -benchtime 4096x -count 3 ./backend/mysqllock/
func BenchmarkShapesFenceRowEngines(b *testing.B) {
	s := testserver.MariaDB(b)
	db := openDB(b, s, 8)
	conns := pinnedConns(b, s, 6)
	engines := []string{"InnoDB", "MyISAM", "Aria", "MEMORY"}
	sqlFile := func(name string) string {
		text, err := os.ReadFile("sql/" + name)
		if err != nil {
			b.Fatal(err)
		}
		return string(text)
	}
	migrate, acquire := sqlFile("migrate.sql"), sqlFile("acquire.sql")
	for _, e := range engines {
		ddl := strings.NewReplacer("distlock_mysql_locks", "engine_"+e, "ENGINE = InnoDB", "ENGINE = "+e).Replace(migrate)
		if e == "MEMORY" {
			ddl = strings.ReplaceAll(ddl, " TEXT ", " VARCHAR(255) ")
		}
		if _, err := db.Exec(ddl); err != nil {
			b.Fatal(err)
		}
	}
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("shapes/engines/%d", i)
	}
	stmt := func(table string) string {
		return strings.Replace(acquire, "INSERT INTO distlock_mysql_locks", "INSERT INTO "+table, 1)
	}
	cs := []locktest.Contender{}
	var nexts [8]atomic.Int64
	cs = append(cs, locktest.Contender{Name: "raw", Lock: func(ctx context.Context, _ int) (func() error, error) {
		return rawLock(ctx, conns[0], mysqllock.LockName(keys[nexts[0].Add(1)%64]), 0)
	}})
	for i, e := range engines {
		q := stmt("engine_" + e)
		conn := conns[i+1]
		cs = append(cs, locktest.Contender{Name: e, Lock: func(ctx context.Context, _ int) (func() error, error) {
			k := keys[nexts[i+1].Add(1)%64]
			name := mysqllock.LockName(k)
			res, err := conn.ExecContext(ctx, q, name, k, "tok-0123456789abcdef0123456789", int64(30e6), "", "", "", name, 0)
			if err != nil {
				return nil, err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				return nil, fmt.Errorf("%s: %q not taken", e, k)
			}
			return func() error {
				var ok sql.NullInt64
				return conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", name).Scan(&ok)
			}, nil
		}})
	}
	locktest.CompareContended(b, locktest.Load{}, cs...)
}
