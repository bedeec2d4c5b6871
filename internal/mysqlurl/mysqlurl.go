// Package mysqlurl turns a mysql:// URL (mysql://user:password@host:port/db?param=value)
// into a go-sql-driver/mysql configuration, for the backends that open
// MySQL or MariaDB from a URL.
package mysqlurl

import (
	"errors"
	"net/url"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock/internal/urlq"
)

// Parse returns the driver configuration of u, for a backend's ParseURL:
// its user and password, its host (port 3306 if it has none) over TCP, its
// database, and q, the parameters the backend did not read itself, which
// must all be the driver's DSN parameters (the driver would send any other
// name to the server as a system variable, so a misspelt one would fail at
// connect time, if at all). Its errors are urlq's, beginning with pkg.
func Parse(pkg string, u *url.URL, q url.Values) (*mysql.Config, error) {
	cfg, part, err := config(u, q)
	if err != nil {
		return nil, urlq.Invalidf(pkg, part, "%w", err)
	}
	if len(cfg.Params) > 0 {
		var names []string
		for name := range cfg.Params {
			names = append(names, name)
		}
		slices.Sort(names)
		return nil, urlq.Invalidf(pkg, "parameter "+strings.Join(names, ", "), "unknown (neither %s's nor a go-sql-driver/mysql DSN parameter)", pkg)
	}
	return cfg, nil
}

// config is Parse without its check of the parameters, and says the part
// of the URL an error is about.
func config(u *url.URL, q url.Values) (*mysql.Config, string, error) {
	if u.Host == "" {
		return nil, "host", errors.New("no server: want mysql://user:password@host:port/database")
	}
	dsn := "tcp(" + u.Host + ")/" + strings.TrimPrefix(u.Path, "/")
	if len(q) > 0 {
		dsn += "?" + q.Encode()
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, "parameters", err
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	return cfg, "", nil
}
