package mysqltool

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock/backend/mysqllock"
	"github.com/distlock/distlock/storetool/doctor"
)

// Check is the doctor check of a mysql:// URL, read by mysqllock.ParseURL:
// CheckServer of its server, whose locks are named locks.
func Check(ctx context.Context, u *url.URL, o doctor.Options, r *doctor.Report) error {
	cfg, err := mysqllock.ParseURL(u)
	if err != nil {
		return doctor.Refused(u, err)
	}
	return CheckServer(ctx, cfg.Driver, true, o, r)
}

// CheckServer inspects the MySQL or MariaDB server that cfg, a driver
// configuration read by a backend's ParseURL, connects to, within the
// sooner of cfg's dial timeout and o.Timeout. named says the locks are
// named locks (GET_LOCK) of pinned sessions, as mysqllock's are, rather
// than rows of a lease table timed by the server's clock, as sqllock's
// (whose tool package checks mysql+table:// with it). A server that does
// not answer fails with an error matching doctor.ErrUnreachable.
func CheckServer(ctx context.Context, cfg *mysql.Config, named bool, o doctor.Options, r *doctor.Report) error {
	cfg = cfg.Clone()
	cfg.ParseTime = true
	cfg.Timeout = min(cfg.Timeout, o.Timeout)
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return fmt.Errorf("%w: %w", doctor.ErrInvalidURL, err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxOpenConns(1)
	qctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var flush, waitTimeout int64
	var version string
	if err := db.QueryRowContext(qctx, "SELECT @@innodb_flush_log_at_trx_commit, @@wait_timeout, VERSION()").Scan(&flush, &waitTimeout, &version); err != nil {
		return doctor.Unreachable("mysql "+cfg.Addr, err)
	}
	r.Add(doctor.Finding{Severity: doctor.Info, Check: "version", Node: cfg.Addr, Seen: "server " + version})
	r.Add(mysqlFlushFinding(cfg.Addr, flush))
	r.Add(mysqlWaitTimeoutFinding(cfg.Addr, time.Duration(waitTimeout)*time.Second, o.Lease, named))
	if named {
		r.Add(mysqlStatementTimeFinding(qctx, db, cfg.Addr))
		r.Add(mysqlSessionFinding(qctx, db, cfg.Addr))
	}
	r.Add(doctor.ClockFinding(qctx, cfg.Addr, time.Microsecond, func(ctx context.Context) (t time.Time, err error) {
		return t, db.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&t)
	}, "sqllock times every lease by the server's clock (expires_at against UTC_TIMESTAMP): an offset this large means the clock is not synchronised, and the step that corrects it ends every lease early by the step's size, so a second client can take a key its holder still holds"))
	return nil
}

// mysqlFlushFinding judges innodb_flush_log_at_trx_commit: only 1 makes a
// commit durable before it is acknowledged.
func mysqlFlushFinding(node string, flush int64) doctor.Finding {
	f := doctor.Finding{Severity: doctor.Info, Check: "innodb_flush_log_at_trx_commit", Node: node,
		Seen: fmt.Sprintf("innodb_flush_log_at_trx_commit %d", flush)}
	if flush == 1 {
		return f
	}
	crash := "a crash of the server"
	if flush == 2 {
		crash = "a crash of the host (power loss, kernel panic)"
	}
	f.Severity = doctor.Warning
	f.Consequence = crash + " loses up to about a second of acknowledged commits: grants in it are forgotten, so a second client can take a key its holder still holds, and the fence of a lost grant can be issued again"
	f.Fix = "SET PERSIST innodb_flush_log_at_trx_commit = 1 (MariaDB: SET GLOBAL, and the same in my.cnf)"
	return f
}

// mysqlWaitTimeoutFinding reports wait_timeout against the lease: the
// server closes a session idle that long, and with it its named locks.
// mysqllock pings each pinned session at least every second (its default
// keepalive), which keeps it; the lease table's pool reconnects.
func mysqlWaitTimeoutFinding(node string, wait, lease time.Duration, named bool) doctor.Finding {
	f := doctor.Finding{Severity: doctor.Info, Check: "wait_timeout", Node: node, Seen: fmt.Sprintf("wait_timeout %v", wait)}
	switch {
	case wait >= lease:
	case !named:
		f.Seen += fmt.Sprintf(", shorter than the lease (%v): harmless to mysql+table:// (sqllock's pool opens a new connection), but a named lock (GET_LOCK, mysql://) held on a session idle that long is freed when the server closes it", lease)
	case wait <= 2*time.Second:
		f.Severity = doctor.Danger
		f.Seen += fmt.Sprintf(", shorter than the lease (%v) and about as short as mysqllock's keepalive (a ping every second at most)", lease)
		f.Consequence = "the server closes a pinned session whose ping comes late, which frees its named lock while its holder still works: another client can take the key before the holder is told"
		f.Fix = "SET GLOBAL wait_timeout = 28800 (the default), or a keepalive well under it (mysqllock.WithKeepalive, keepalive= in the URL)"
	default:
		f.Seen += fmt.Sprintf(", shorter than the lease (%v): mysqllock's keepalive pings each pinned session at most every second, which keeps it; a raw GET_LOCK held on a session idle that long is freed when the server closes it", lease)
	}
	return f
}

// mysqlStatementTimeFinding reports a server-wide statement time limit: on
// MariaDB max_statement_time ends any statement, a waiting GET_LOCK
// included; on MySQL max_execution_time ends only SELECTs, and mysqllock
// waits in an INSERT.
func mysqlStatementTimeFinding(ctx context.Context, db *sql.DB, node string) doctor.Finding {
	var limit float64
	if err := db.QueryRowContext(ctx, "SELECT @@max_statement_time").Scan(&limit); err == nil {
		f := doctor.Finding{Severity: doctor.Info, Check: "max_statement_time", Node: node, Seen: fmt.Sprintf("max_statement_time %gs", limit)}
		if limit > 0 {
			f.Severity = doctor.Warning
			f.Consequence = "MariaDB ends every statement that runs longer, so a lock wait (GET_LOCK) longer than it fails with a statement timeout instead of waiting its full wait"
			f.Fix = "SET GLOBAL max_statement_time = 0, or for distlock's user only (ALTER USER ... WITH MAX_STATEMENT_TIME 0)"
		}
		return f
	}
	var ms int64
	if err := db.QueryRowContext(ctx, "SELECT @@max_execution_time").Scan(&ms); err != nil {
		return doctor.Unread("max_execution_time", node, err, "SELECT @@max_execution_time (MySQL) or @@max_statement_time (MariaDB)")
	}
	return doctor.Finding{Severity: doctor.Info, Check: "max_execution_time", Node: node,
		Seen: fmt.Sprintf("max_execution_time %dms: it limits SELECTs only; mysqllock waits in an INSERT and is not affected", ms)}
}

// mysqlProbeLock is the named lock the session check holds for a moment.
const mysqlProbeLock = "distlock-doctor-probe"

// mysqlSessionFinding holds a named lock on one client connection and checks,
// statement by statement, that the same server session answers and still
// holds it: a proxy that multiplexes statements over server sessions
// (ProxySQL with multiplexing, a transaction-mode router) or a pool that
// resets the session between uses (COM_RESET_CONNECTION, COM_CHANGE_USER)
// would move or drop the lock.
func mysqlSessionFinding(ctx context.Context, db *sql.DB, node string) doctor.Finding {
	f := doctor.Finding{Severity: doctor.Info, Check: "session", Node: node}
	conn, err := db.Conn(ctx)
	if err != nil {
		return doctor.Unread("session", node, err, "ask whether a proxy (ProxySQL, MaxScale, MySQL Router) sits in front, and whether it multiplexes or resets sessions")
	}
	defer conn.Close()
	var got sql.NullInt64
	var first uint64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0), CONNECTION_ID()", mysqlProbeLock).Scan(&got, &first); err != nil || got.Int64 != 1 {
		return doctor.Unread("session", node, fmt.Errorf("GET_LOCK(%q, 0) = %v: %v", mysqlProbeLock, got, err), "run SELECT GET_LOCK('x', 0), then SELECT IS_USED_LOCK('x'), CONNECTION_ID() on the same connection")
	}
	defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", mysqlProbeLock) }()
	const probes = 4
	for range probes {
		var holder sql.NullInt64
		var id uint64
		if err := conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?), CONNECTION_ID()", mysqlProbeLock).Scan(&holder, &id); err != nil {
			return doctor.Unread("session", node, err, "run SELECT IS_USED_LOCK('x'), CONNECTION_ID() after SELECT GET_LOCK('x', 0) on the same connection")
		}
		switch {
		case id != first:
			f.Severity = doctor.Danger
			f.Seen = fmt.Sprintf("statements of one client connection ran on server sessions %d and %d: a proxy multiplexes them", first, id)
			f.Consequence = "a named lock stays on the server session that took it, which the proxy then lends to other clients: the lock is freed by no one or by someone else, and pinning a connection cannot help"
			f.Fix = "point mysql:// at the server directly, or turn multiplexing off for distlock's user (ProxySQL: mysql_query_rules multiplex=0), or use mysql+table:// (the lease table)"
			return f
		case uint64(holder.Int64) != first:
			f.Severity = doctor.Danger
			f.Seen = fmt.Sprintf("session %d lost the named lock it took, between two statements: the session is reset between uses", first)
			f.Consequence = "a reset (COM_RESET_CONNECTION, COM_CHANGE_USER) frees every named lock of the session, so a held lock vanishes while its holder still works"
			f.Fix = "turn off session reset between uses in the pool or proxy in front, or use mysql+table:// (the lease table)"
			return f
		}
	}
	f.Seen = fmt.Sprintf("%d statements ran on one server session, which kept its named lock: no multiplexing proxy or session reset seen", probes+1)
	return f
}
