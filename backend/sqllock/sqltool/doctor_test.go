package sqltool

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/doctor/doctortest"
	"github.com/distlock/distlock/storetool/migrate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMariaDBLeaseTable: a wait_timeout (28800s by default) shorter than
// the lease is harmless to the lease table, whose pool reconnects; a lease
// table not yet created is a danger, fixed by the migration.
func TestMariaDBLeaseTable(t *testing.T) {
	s := testserver.MariaDB(t)
	u := "mysql+table://root@" + s.Addr() + "/distlock?request_timeout=2s&timeout=3s"
	r := doctortest.Run(t, u, doctor.Options{Lease: 9 * time.Hour})
	doctortest.Want(t, r, "wait_timeout", doctor.Info, "harmless to mysql+table://")
	if n := len(doctortest.Findings(r, "session")); n != 0 {
		t.Errorf("the named-lock session check ran for the lease table:\n%s", doctortest.Dump(r))
	}
	f := doctortest.Want(t, r, "schema", doctor.Danger, "distlock_leases' doesn't exist")
	if !strings.Contains(f.Fix, migrate.Command(u)) {
		t.Errorf("fix: %s", f.Fix)
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Migrate(context.Background(), pu); err != nil {
		t.Fatal(err)
	}
	doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "schema", doctor.Info, "distlock_fence_floor exist")
}

// TestRefusedAsOpen: a URL sqllock refuses, doctor refuses in its words,
// mysqllock's parameters included.
func TestRefusedAsOpen(t *testing.T) {
	const db = "mysql+table://root@127.0.0.1:1/db"
	doctortest.Refused(t, sqllock.ParseURL, db+"?colour=red", db+"?keepalive=1s", db+"?request_timeout=soon", "mysql+table:///db")
}

func TestUnreachable(t *testing.T) {
	doctortest.Unreachable(t, func(a string) []string { return []string{"mysql+table://root@" + a + "/db"} })
}
