package doctor

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// checkMySQL inspects the MySQL or MariaDB server of a mysql:// URL, whose
// locks (sqllock) are rows of a lease table timed by the server's clock.
func checkMySQL(ctx context.Context, u *url.URL, o Options, r *Report) error {
	cfg, err := mysqlConfig(u, o)
	if err != nil {
		return err
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidURL, err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxOpenConns(1)
	qctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var flush, waitTimeout int64
	var version string
	if err := db.QueryRowContext(qctx, "SELECT @@innodb_flush_log_at_trx_commit, @@wait_timeout, VERSION()").Scan(&flush, &waitTimeout, &version); err != nil {
		return unreachable("mysql "+cfg.Addr, err)
	}
	r.add(Finding{Severity: Info, Check: "version", Node: cfg.Addr, Seen: "server " + version})
	r.add(mysqlFlushFinding(cfg.Addr, flush))
	r.add(mysqlWaitTimeoutFinding(cfg.Addr, time.Duration(waitTimeout)*time.Second, o.Lease))
	r.add(clockFinding(qctx, cfg.Addr, time.Microsecond, func(ctx context.Context) (t time.Time, err error) {
		return t, db.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&t)
	}, "sqllock times every lease by the server's clock (expires_at against UTC_TIMESTAMP): an offset this large means the clock is not synchronised, and the step that corrects it ends every lease early by the step's size, so a second client can take a key its holder still holds"))
	return nil
}

// mysqlConfig turns mysql://user:password@host:port/db?params into a
// go-sql-driver/mysql configuration, as sqllock reads the URL, with the
// connect timeout bounded by o.Timeout.
func mysqlConfig(u *url.URL, o Options) (*mysql.Config, error) {
	var b strings.Builder
	if u.User != nil {
		b.WriteString(u.User.Username())
		if p, ok := u.User.Password(); ok {
			b.WriteString(":" + p)
		}
		b.WriteByte('@')
	}
	host := u.Host
	if host == "" {
		return nil, invalid(u, "no server: want mysql://user:password@host:port/db")
	}
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "3306")
	}
	b.WriteString("tcp(" + host + ")/" + strings.TrimPrefix(u.Path, "/"))
	if u.RawQuery != "" {
		b.WriteString("?" + u.RawQuery)
	}
	cfg, err := mysql.ParseDSN(b.String())
	if err != nil {
		return nil, invalid(u, "%v", err)
	}
	cfg.ParseTime = true
	if cfg.Timeout == 0 || cfg.Timeout > o.Timeout {
		cfg.Timeout = o.Timeout
	}
	return cfg, nil
}

// mysqlFlushFinding judges innodb_flush_log_at_trx_commit: only 1 makes a
// commit durable before it is acknowledged.
func mysqlFlushFinding(node string, flush int64) Finding {
	f := Finding{Severity: Info, Check: "innodb_flush_log_at_trx_commit", Node: node,
		Seen: fmt.Sprintf("innodb_flush_log_at_trx_commit %d", flush)}
	if flush == 1 {
		return f
	}
	crash := "a crash of the server"
	if flush == 2 {
		crash = "a crash of the host (power loss, kernel panic)"
	}
	f.Severity = Warning
	f.Consequence = crash + " loses up to about a second of acknowledged commits: grants in it are forgotten, so a second client can take a key its holder still holds, and the fence of a lost grant can be issued again"
	f.Fix = "SET PERSIST innodb_flush_log_at_trx_commit = 1 (MariaDB: SET GLOBAL, and the same in my.cnf)"
	return f
}

// mysqlWaitTimeoutFinding reports wait_timeout against the lease: the
// lease table's pool reconnects, so only session-bound locks care.
func mysqlWaitTimeoutFinding(node string, wait, lease time.Duration) Finding {
	f := Finding{Severity: Info, Check: "wait_timeout", Node: node, Seen: fmt.Sprintf("wait_timeout %v", wait)}
	if wait < lease {
		f.Seen += fmt.Sprintf(", shorter than the lease (%v): harmless to mysql:// (sqllock's pool opens a new connection), but a named lock (GET_LOCK) held on a session idle that long is freed when the server closes it", lease)
	}
	return f
}
