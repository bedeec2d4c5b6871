// Package mysqlurl turns a mysql:// URL (mysql://user:password@host:port/db?param=value)
// into a go-sql-driver/mysql configuration, for every package that opens
// MySQL or MariaDB from a URL.
package mysqlurl

import (
	"errors"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// Config returns the driver configuration of u: its user and password, its
// host (port 3306 if it has none) over TCP, its database, and its query
// parameters as the driver's DSN parameters, less those named in own (the
// caller's own parameters, which it reads itself). It fails on a URL
// without a host or with a parameter the driver refuses.
func Config(u *url.URL, own ...string) (*mysql.Config, error) {
	if u.Host == "" {
		return nil, errors.New("no server: want mysql://user:password@host:port/database")
	}
	q := u.Query()
	for _, p := range own {
		q.Del(p)
	}
	dsn := "tcp(" + u.Host + ")/" + strings.TrimPrefix(u.Path, "/")
	if len(q) > 0 {
		dsn += "?" + q.Encode()
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	return cfg, nil
}
