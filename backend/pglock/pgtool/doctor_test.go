package pgtool

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/doctor/doctortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pgExec runs statements on a test PostgreSQL as postgres.
func pgExec(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func TestPostgresTimeouts(t *testing.T) {
	s := testserver.Postgres(t)
	dsn := testserver.PostgresDSN(s)
	r := doctortest.Run(t, dsn+"&request_timeout=2s&key_ids=sha256", doctor.Options{})
	doctortest.Want(t, r, "fsync", doctor.Warning, "fsync off")
	doctortest.Want(t, r, "synchronous_commit", doctor.Warning, "synchronous_commit off")
	doctortest.Want(t, r, "idle_session_timeout", doctor.Info, "0 (off)")
	doctortest.Want(t, r, "pooler", doctor.Info, "no pooler seen")

	pgExec(t, dsn, "ALTER ROLE postgres SET idle_session_timeout = '3s'",
		"ALTER DATABASE postgres SET statement_timeout = '2s'",
		"ALTER ROLE postgres SET idle_in_transaction_session_timeout = '5s'",
		"ALTER ROLE postgres SET lock_timeout = '1s'")
	r = doctortest.Run(t, dsn, doctor.Options{})
	doctortest.Want(t, r, "idle_session_timeout", doctor.Danger, "idle_session_timeout 3s")
	doctortest.Want(t, r, "statement_timeout", doctor.Warning, "statement_timeout 2s")
	doctortest.Want(t, r, "lock_timeout", doctor.Warning, "lock_timeout 1s")
	doctortest.Want(t, r, "idle_in_transaction_session_timeout", doctor.Warning, "5s, shorter than the lease (30s)")
	if f := doctortest.Findings(doctortest.Run(t, dsn, doctor.Options{Lease: 4 * time.Second}), "idle_in_transaction_session_timeout"); len(f) != 0 {
		t.Errorf("a 5s timeout against a 4s lease is reported: %+v", f)
	}

	pgExec(t, dsn, "ALTER ROLE postgres SET idle_session_timeout = '1min'")
	doctortest.Want(t, doctortest.Run(t, dsn, doctor.Options{}), "idle_session_timeout", doctor.Info, "idle_session_timeout 1m0s, over twice")
}

// TestPostgresClean: no danger, and the one warning is the test server's
// fsync=off, which its command line sets beyond ALTER SYSTEM's reach.
func TestPostgresClean(t *testing.T) {
	s := testserver.Postgres(t)
	dsn := testserver.PostgresDSN(s)
	pgExec(t, dsn, "ALTER ROLE postgres SET synchronous_commit = on")
	r := doctortest.Run(t, dsn, doctor.Options{})
	if r.Count(doctor.Danger) != 0 || r.Count(doctor.Warning) != 1 || len(doctortest.Findings(r, "fsync")) != 1 {
		t.Fatalf("want only the fsync warning, got:\n%s", doctortest.Dump(r))
	}
	doctortest.Want(t, r, "clock", doctor.Info, "server clock")
	doctortest.Want(t, r, "pooler", doctor.Info, "no pooler seen")
}

func TestInvalidURLs(t *testing.T) {
	doctortest.InvalidURLs(t, func(a string) []string { return []string{"postgres://" + a + "/db?connect_timeout=x"} })
}

// TestRefusedAsOpen: a URL pglock refuses, doctor refuses in its words.
// (A parameter that is neither pglock's nor pgx's is a server setting, as
// in Open: the server judges it.)
func TestRefusedAsOpen(t *testing.T) {
	const db = "postgres://postgres@127.0.0.1:1/db"
	doctortest.Refused(t, pglock.ParseURL, db+"?key_ids=md5", db+"?request_timeout=soon", db+"?terminate_on_force_release=maybe",
		db+"?connect_timeout=x", "postgresql://postgres@127.0.0.1:1/db?request_timeout=1s&request_timeout=2s")
}

func TestUnreachable(t *testing.T) {
	doctortest.Unreachable(t, func(a string) []string {
		return []string{"postgres://postgres@" + a + "/postgres", "postgresql://postgres@" + a + "/postgres"}
	})
}
