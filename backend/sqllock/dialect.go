package sqllock

import (
	"context"
	"embed"
	"path"
	"strings"
)

//go:embed sql
var sqlFiles embed.FS

// Dialect holds the SQL of one database. Every difference between the
// databases lives in its files under sql/, and in how the acquire statement
// reports the fence (a returned row, or the statement's insert id); the rest
// of the Go code is the same for all. Each statement takes the same
// arguments in the same order in every dialect.
type Dialect struct {
	name     string
	notifies bool // the release statement sends a notice on releaseChannel
	migrate  []string
	// checkSchema fails, reading no row, if a table or sequence that
	// migrate makes is missing.
	checkSchema string
	acquire     string // key, token, ttl µs, owner, metadata -> fence, 0 if held
	// acquireQueued is acquire for the head of the key's queue of waiting
	// clients (PostgreSQL only, see queue.go).
	acquireQueued string
	grant         func(ctx context.Context, b *Backend, q string, args ...any) (uint64, error)
	renew         string   // ttl µs, key, token
	holds         string   // key, token -> count
	release       string   // key, token
	inspect       string   // key -> held, fence, owner, metadata, ttl µs
	list          string   // prefix, prefix -> key, fence, owner, metadata, ttl µs
	listPage      string   // after, prefix, end of prefix, prefix, prefix, limit -> as list
	cleanup       []string // each: retention µs, batch; the last one deletes

	inspectForUpdate string // key -> as inspect, locking the row
	forceRelease     string // key

	// queueAbandoned (key, pid -> running, ended) ends a session the
	// backend dropped from the key's queue (PostgreSQL only, see queue.go).
	queueAbandoned string

	// hasFenceSequence (-> count) finds the fence sequence of an earlier
	// version of the schema, and migrateFromSequence raises the fence floor
	// above it; both empty where the schema never had one.
	hasFenceSequence    string
	migrateFromSequence string
	// tokenWidth (-> width) reads the token column's width, and widenToken
	// widens it to distlock.MaxTokenLen when an earlier schema made it
	// narrower; both empty where the column has no width.
	tokenWidth string
	widenToken string
}

var (
	// Postgres is the dialect of PostgreSQL 11 and later (driver "pgx" from
	// github.com/jackc/pgx/v5/stdlib).
	Postgres = loadDialect("postgres", grantReturning)
	// MariaDB is the dialect of MariaDB 10.5 and later and MySQL 8 (driver
	// "mysql" from github.com/go-sql-driver/mysql). Its SQL uses neither
	// sequences nor RETURNING, which MySQL lacks.
	MariaDB = loadDialect("mariadb", grantInsertID)
	// MySQL is MariaDB's dialect under the other name: the same SQL runs on
	// both.
	MySQL = MariaDB
)

// Name returns the dialect's name, "postgres" or "mariadb".
func (d *Dialect) Name() string { return d.name }

func loadDialect(name string, grant func(context.Context, *Backend, string, ...any) (uint64, error)) *Dialect {
	read := func(file string) string {
		b, err := sqlFiles.ReadFile(path.Join("sql", name, file))
		if err != nil {
			panic("sqllock: missing embedded SQL: " + err.Error()) // a build defect
		}
		return string(b)
	}
	d := &Dialect{
		name:             name,
		notifies:         name == "postgres",
		migrate:          splitStatements(read("migrate.sql")),
		checkSchema:      read("check_schema.sql"),
		acquire:          read("acquire.sql"),
		grant:            grant,
		renew:            read("renew.sql"),
		holds:            read("holds.sql"),
		release:          read("release.sql"),
		inspect:          read("inspect.sql"),
		list:             read("list.sql"),
		listPage:         read("list_page.sql"),
		cleanup:          splitStatements(read("cleanup.sql")),
		inspectForUpdate: read("inspect_for_update.sql"),
		forceRelease:     read("force_release.sql"),
	}
	if name == "postgres" {
		d.acquireQueued = read("acquire_queued.sql")
		d.queueAbandoned = read("queue_abandoned.sql")
	}
	if name == "mariadb" {
		d.hasFenceSequence = read("has_fence_sequence.sql")
		d.migrateFromSequence = read("migrate_from_sequence.sql")
		d.tokenWidth = read("token_width.sql")
		d.widenToken = read("widen_token.sql")
	}
	return d
}

// splitStatements splits a script at semicolons that end a line, since not
// every driver runs several statements in one call.
func splitStatements(script string) []string {
	var out []string
	for s := range strings.SplitSeq(script, ";\n") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
