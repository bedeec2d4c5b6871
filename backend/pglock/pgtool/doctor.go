package pgtool

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/storetool/doctor"
)

// pgKeepaliveCap is pglock's default cap on the keepalive interval of a
// pinned session (WithKeepalive): the session is idle at most this long,
// or a third of the lease if that is shorter.
const pgKeepaliveCap = 5 * time.Second

// pgPoolerProbes is how many separate statements the pooler check sends to
// see whether they run on one server session.
const pgPoolerProbes = 8

// pgSettings are the settings read, with their effective values for the
// URL's role and database.
var pgSettings = []string{"idle_session_timeout", "idle_in_transaction_session_timeout", "statement_timeout", "lock_timeout", "fsync", "synchronous_commit"}

// checkPostgres inspects the PostgreSQL server of a postgres:// URL, read
// by pglock.ParseURL, as the URL's role sees it in the URL's database. The
// connection is made within the URL's connect timeout and o.Timeout.
func checkPostgres(ctx context.Context, u *url.URL, o doctor.Options, r *doctor.Report) error {
	pc, err := pglock.ParseURL(u)
	if err != nil {
		return doctor.Refused(u, err)
	}
	cfg := pc.Pool.ConnConfig.Copy()
	cfg.ConnectTimeout = min(cfg.ConnectTimeout, o.Timeout)
	node := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return doctor.Unreachable("postgres "+node, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.Timeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	qctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	settings, err := pgReadSettings(qctx, conn)
	if err != nil {
		r.Add(doctor.Unread("settings", node, err, "run SHOW for "+fmt.Sprint(pgSettings)+" as the URL's role in its database"))
	} else {
		pgSettingFindings(node, settings, o.Lease, r)
	}
	r.Add(pgPoolerFinding(qctx, conn, node))
	r.Add(doctor.ClockFinding(qctx, node, time.Microsecond, func(ctx context.Context) (t time.Time, err error) {
		return t, conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t)
	}, "pglock's leases are timed by the client and an advisory lock lives as long as its session, so lock expiry does not depend on this offset; an unsynchronised clock still skews logs and the times in the lock rows"))
	return nil
}

// pgSetting is one setting's effective value.
type pgSetting struct {
	value string
	unit  string // pg_settings' unit: "ms", "s", "min" or "" for none
}

// duration returns the setting as a duration; 0 means off.
func (s pgSetting) duration() time.Duration {
	n, _ := strconv.ParseInt(s.value, 10, 64)
	unit := map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "min": time.Minute}[s.unit]
	return time.Duration(n) * unit
}

// pgReadSettings reads pgSettings from pg_settings, which holds the
// session's effective values (ALTER ROLE and ALTER DATABASE included).
// A setting this server lacks (idle_session_timeout before PostgreSQL 14)
// is absent from the map.
func pgReadSettings(ctx context.Context, conn *pgx.Conn) (map[string]pgSetting, error) {
	rows, err := conn.Query(ctx, "SELECT name, setting, coalesce(unit, '') FROM pg_settings WHERE name = ANY($1)", pgSettings)
	if err != nil {
		return nil, fmt.Errorf("read pg_settings: %w", err)
	}
	m := map[string]pgSetting{}
	for rows.Next() {
		var name string
		var s pgSetting
		if err := rows.Scan(&name, &s.value, &s.unit); err != nil {
			return nil, fmt.Errorf("read pg_settings: %w", err)
		}
		m[name] = s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read pg_settings: %w", err)
	}
	return m, nil
}

// pgSettingFindings judges the timeouts and durability settings.
func pgSettingFindings(node string, s map[string]pgSetting, lease time.Duration, r *doctor.Report) {
	if st, ok := s["idle_session_timeout"]; ok {
		r.Add(pgIdleSession(node, st.duration(), lease))
	}
	if d := s["idle_in_transaction_session_timeout"].duration(); d > 0 && d < lease {
		r.Add(doctor.Finding{Severity: doctor.Warning, Check: "idle_in_transaction_session_timeout", Node: node,
			Seen:        fmt.Sprintf("idle_in_transaction_session_timeout %v, shorter than the lease (%v)", d, lease),
			Consequence: "pglock's session locks keep no transaction open and are not affected; a lock taken in your own transaction (pglock's transaction-scoped helper, pg_advisory_xact_lock) is freed when the server ends that transaction for being idle this long, and the rest of the transaction fails",
			Fix:         "ALTER ROLE <role> SET idle_in_transaction_session_timeout = 0 (or longer than any transaction holding a lock may idle)"})
	}
	for _, name := range []string{"statement_timeout", "lock_timeout"} {
		if d := s[name].duration(); d > 0 {
			r.Add(doctor.Finding{Severity: doctor.Warning, Check: name, Node: node,
				Seen:        fmt.Sprintf("%s %v", name, d),
				Consequence: fmt.Sprintf("a Lock that waits in the database's queue (pg_advisory_lock) is cancelled by the server after %v and fails with an error instead of waiting as long as asked; held locks are not affected", d),
				Fix:         fmt.Sprintf("ALTER ROLE <role> SET %s = 0 for the role distlock connects as (or longer than the longest wait)", name)})
		}
	}
	if s["fsync"].value == "off" {
		r.Add(doctor.Finding{Severity: doctor.Warning, Check: "fsync", Node: node,
			Seen:        "fsync off",
			Consequence: "a crash of PostgreSQL alone loses nothing, but a crash of the host (power loss, kernel panic) can lose committed data or corrupt the database, the sequence distlock_pg_fence included: fences can be issued again",
			Fix:         "ALTER SYSTEM SET fsync = on; SELECT pg_reload_conf()"})
	}
	if s["synchronous_commit"].value == "off" {
		r.Add(doctor.Finding{Severity: doctor.Warning, Check: "synchronous_commit", Node: node,
			Seen:        "synchronous_commit off",
			Consequence: "a crash of the server loses the last commits (up to three wal_writer_delay, 600 ms by default), and the sequence distlock_pg_fence can issue again fences it issued in that window",
			Fix:         "ALTER ROLE <role> SET synchronous_commit = on (or ALTER SYSTEM and pg_reload_conf())"})
	}
}

// pgIdleSession judges idle_session_timeout against the keepalive of
// pglock's pinned sessions.
func pgIdleSession(node string, d, lease time.Duration) doctor.Finding {
	interval := min(lease/3, pgKeepaliveCap)
	f := doctor.Finding{Severity: doctor.Info, Check: "idle_session_timeout", Node: node, Seen: "idle_session_timeout 0 (off)"}
	switch {
	case d == 0:
	case d <= 2*interval:
		f.Severity = doctor.Danger
		f.Seen = fmt.Sprintf("idle_session_timeout %v", d)
		f.Consequence = fmt.Sprintf("a held lock's pinned session is idle up to %v between keepalive queries; the server ends a session idle for %v, which frees its advisory locks at once: another client can take the key before the holder is told", interval, d)
		f.Fix = "ALTER ROLE <role> SET idle_session_timeout = 0 (or ALTER DATABASE), for the role and database distlock uses; or well above the keepalive interval"
	default:
		f.Seen = fmt.Sprintf("idle_session_timeout %v, over twice the pinned sessions' keepalive interval (%v); a WithKeepalive above it would let the server end a session holding locks", d, interval)
	}
	return f
}

// pgPoolerFinding looks for a pooler between the client and the server. A
// pooler answers the startup with a backend key of its own, so the pid it
// reports differs from pg_backend_pid(); in transaction or statement mode,
// separate statements can run on different server sessions.
func pgPoolerFinding(ctx context.Context, conn *pgx.Conn, node string) doctor.Finding {
	f := doctor.Finding{Check: "pooler", Node: node}
	pids := map[uint32]bool{}
	for range pgPoolerProbes {
		var pid uint32
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return doctor.Unread("pooler", node, err, "ask your platform whether a pooler (PgBouncer, pgcat, Odyssey, RDS Proxy) sits in front, and in which mode")
		}
		pids[pid] = true
	}
	switch {
	case len(pids) > 1:
		f.Severity = doctor.Danger
		f.Seen = fmt.Sprintf("%d separate statements ran on %d different server sessions: a pooler in transaction or statement mode", pgPoolerProbes, len(pids))
		f.Consequence = "a session advisory lock stays on the server session that took it, which the pooler then hands to other clients: the lock is released by no one or by someone else, and pglock's pinning cannot help"
		f.Fix = "point distlock at PostgreSQL directly, or at a pool in session mode (PgBouncer pool_mode = session)"
	case !pids[conn.PgConn().PID()]:
		f.Severity = doctor.Warning
		f.Seen = fmt.Sprintf("the startup's backend key (%d) is not the server session's pid: a pooler or proxy answers in front; %d statements all ran on one session, which does not tell its mode", conn.PgConn().PID(), pgPoolerProbes)
		f.Consequence = "in transaction or statement mode, session advisory locks end up on server sessions shared with other clients; session mode is safe"
		f.Fix = "check the pooler's mode (PgBouncer: SHOW POOLS on its admin console); use session mode or connect to PostgreSQL directly"
	default:
		f.Severity = doctor.Info
		f.Seen = "no pooler seen: the startup's backend key is the server session's own pid (a proxy that passes keys through would not be seen)"
	}
	return f
}
