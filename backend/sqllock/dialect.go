package sqllock

import (
	"embed"
	"path"
	"strings"
)

//go:embed sql
var sqlFiles embed.FS

// Dialect holds the SQL of one database. Every difference between the
// databases lives in its files under sql/; the Go code is the same for all.
// Each statement takes the same arguments in the same order in every dialect.
type Dialect struct {
	name     string
	notifies bool // the release statement sends a notice on releaseChannel
	migrate  []string
	acquire  string // key, token, ttl µs, owner, metadata -> token, fence
	renew    string // ttl µs, key, token
	holds    string // key, token -> count
	release  string // key, token
	inspect  string // key -> held, fence, owner, metadata, ttl µs
	list     string // prefix, prefix -> key, fence, owner, metadata, ttl µs
	cleanup  string // retention µs, batch
}

var (
	// Postgres is the dialect of PostgreSQL 11 and later (driver "pgx" from
	// github.com/jackc/pgx/v5/stdlib).
	Postgres = loadDialect("postgres")
	// MariaDB is the dialect of MariaDB 10.5 and later (driver "mysql" from
	// github.com/go-sql-driver/mysql). It needs sequences and INSERT ...
	// RETURNING, which MySQL lacks.
	MariaDB = loadDialect("mariadb")
)

// Name returns the dialect's name, "postgres" or "mariadb".
func (d *Dialect) Name() string { return d.name }

func loadDialect(name string) *Dialect {
	read := func(file string) string {
		b, err := sqlFiles.ReadFile(path.Join("sql", name, file))
		if err != nil {
			panic("sqllock: missing embedded SQL: " + err.Error()) // a build defect
		}
		return string(b)
	}
	return &Dialect{
		name:     name,
		notifies: name == "postgres",
		migrate:  splitStatements(read("migrate.sql")),
		acquire:  read("acquire.sql"),
		renew:    read("renew.sql"),
		holds:    read("holds.sql"),
		release:  read("release.sql"),
		inspect:  read("inspect.sql"),
		list:     read("list.sql"),
		cleanup:  read("cleanup.sql"),
	}
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
