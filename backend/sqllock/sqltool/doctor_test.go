package sqltool

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/doctor/doctortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMariaDBLeaseTable: a wait_timeout (28800s by default) shorter than
// the lease is harmless to the lease table, whose pool reconnects.
func TestMariaDBLeaseTable(t *testing.T) {
	s := testserver.MariaDB(t)
	r := doctortest.Run(t, "mysql+table://root@"+s.Addr()+"/distlock?request_timeout=2s&timeout=3s", doctor.Options{Lease: 9 * time.Hour})
	doctortest.Want(t, r, "wait_timeout", doctor.Info, "harmless to mysql+table://")
	if n := len(doctortest.Findings(r, "session")); n != 0 {
		t.Errorf("the named-lock session check ran for the lease table:\n%s", doctortest.Dump(r))
	}
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
