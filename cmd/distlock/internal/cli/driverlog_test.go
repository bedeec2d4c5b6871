package cli

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock/internal/testserver"
)

// A store driver's own log lines stay off the user's stderr: the MySQL
// driver logs a connection the server closed ("[mysql] ... unexpected EOF")
// before it returns the error that distlock reports in its own words.
func TestDriverLogsStayOut(t *testing.T) {
	bin := buildDistlock(t)
	srv := testserver.MariaDB(t)
	admin, err := sql.Open("mysql", testserver.MariaDBDSN(srv))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	admin.SetMaxOpenConns(1)
	p := startDistlock(t, bin, nil, "", "run", "--backend", "mysql://root@"+srv.Addr()+"/distlock?timeout=5s",
		"--key", "driver-log", "--lease", "3s", "--grace", "1s", "--", "sleep", "20")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !waitFor(10*time.Second, func() bool {
		var n int
		err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND user = 'root'").Scan(&n)
		return err == nil && n > 0
	}) {
		t.Fatal("run opened no connection")
	}
	time.Sleep(500 * time.Millisecond) // the lock taken
	for range 3 {                      // the sessions the run's client holds, and those it opens again
		rows, err := admin.QueryContext(ctx, "SELECT id FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND user = 'root'")
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		_ = rows.Close()
		for _, id := range ids {
			_, _ = admin.ExecContext(ctx, "KILL ?", id) // one may have gone already
		}
		time.Sleep(time.Second)
	}
	r := p.mustWait(t, 30*time.Second)
	if r.code != ExitLockLost {
		t.Errorf("exit %d, want %d (the lock's session was killed): %s", r.code, ExitLockLost, r.stderr)
	}
	for _, line := range r.stderrLines() {
		if strings.HasPrefix(line, "[mysql]") {
			t.Errorf("the driver's own log line reached stderr: %q", line)
		}
	}
}
