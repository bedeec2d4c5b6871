package mysqltool

import (
	"database/sql"
	"net/url"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/mysqllock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/doctor/doctortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mysqlDB opens a handle on the server of a mysql:// URL, closed with the test.
func mysqlDB(t *testing.T, rawURL string) *sql.DB {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysqllock.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mysql.NewConnector(cfg.Driver)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestMariaDBDurability(t *testing.T) {
	s := testserver.MariaDB(t) // innodb_flush_log_at_trx_commit=0
	u := "mysql://root@" + s.Addr() + "/distlock"
	r := doctortest.Run(t, u, doctor.Options{Lease: time.Hour})
	doctortest.Want(t, r, "innodb_flush_log_at_trx_commit", doctor.Warning, "innodb_flush_log_at_trx_commit 0")
	doctortest.Want(t, r, "version", doctor.Info, "MariaDB")

	db := mysqlDB(t, u)
	if _, err := db.Exec("SET GLOBAL innodb_flush_log_at_trx_commit = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("SET GLOBAL wait_timeout = 20"); err != nil {
		t.Fatal(err)
	}
	r = doctortest.Run(t, u, doctor.Options{})
	doctortest.Clean(t, r)
	doctortest.Want(t, r, "wait_timeout", doctor.Info, "wait_timeout 20s, shorter than the lease (30s): mysqllock's keepalive")
	doctortest.Want(t, r, "clock", doctor.Info, "server clock")
	doctortest.Want(t, r, "session", doctor.Info, "no multiplexing proxy or session reset seen")
	doctortest.Want(t, r, "max_statement_time", doctor.Info, "max_statement_time 0s")
}

// TestMariaDBNamedLockPitfalls: a wait_timeout as short as mysqllock's
// keepalive and a server-wide statement time limit are reported for
// mysql://, whose URL may carry mysqllock's own parameters.
func TestMariaDBNamedLockPitfalls(t *testing.T) {
	s := testserver.MariaDB(t)
	u := "mysql://root@" + s.Addr() + "/distlock"
	db := mysqlDB(t, u)
	for _, q := range []string{"SET GLOBAL wait_timeout = 2", "SET GLOBAL max_statement_time = 1.5"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	r := doctortest.Run(t, u+"?request_timeout=2s&keepalive=500ms&pool_wait=1s&kill_on_force_release=true&max_open_conns=4&timeout=3s", doctor.Options{})
	doctortest.Want(t, r, "wait_timeout", doctor.Danger, "about as short as mysqllock's keepalive")
	doctortest.Want(t, r, "max_statement_time", doctor.Warning, "max_statement_time 1.5s")
}

func TestInvalidURLs(t *testing.T) {
	doctortest.InvalidURLs(t, func(string) []string { return []string{"mysql:///db"} })
}

// TestRefusedAsOpen: a URL mysqllock refuses, doctor refuses in its
// words.
func TestRefusedAsOpen(t *testing.T) {
	const db = "mysql://root@127.0.0.1:1/db"
	doctortest.Refused(t, mysqllock.ParseURL, db+"?colour=red", db+"?sql_mode=ANSI", db+"?keepalive=soon",
		db+"?max_open_conns=-1", db+"?parseTime=maybe")
}

func TestUnreachable(t *testing.T) {
	doctortest.Unreachable(t, func(a string) []string { return []string{"mysql://root@" + a + "/db"} })
}
