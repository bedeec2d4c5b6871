package mysqlurl_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/mysqlurl"
)

func TestParse(t *testing.T) {
	u, _ := url.Parse("mysql://app:p%40ss:w@db.internal/locks?keepalive=1s")
	cfg, err := mysqlurl.Parse("xlock", u, url.Values{"timeout": {"2s"}, "parseTime": {"true"}})
	if err != nil || cfg.User != "app" || cfg.Passwd != "p@ss:w" || cfg.Net != "tcp" || cfg.Addr != "db.internal:3306" ||
		cfg.DBName != "locks" || cfg.Timeout != 2*time.Second || !cfg.ParseTime {
		t.Fatalf("Parse = %+v, %v", cfg, err)
	}
	if _, err := mysqlurl.Parse("xlock", &url.URL{Scheme: "mysql", Path: "/db"}, nil); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("no host: %v", err)
	}
	for q, want := range map[string]string{
		"sql_mode=ANSI&colour=red": "xlock: URL parameter colour, sql_mode: distlock: invalid option: unknown",
		"parseTime=maybe":          "xlock: URL parameters: distlock: invalid option: ",
	} {
		v, _ := url.ParseQuery(q)
		_, err := mysqlurl.Parse("xlock", u, v)
		if !errors.Is(err, driver.ErrInvalidOption) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: error %v, want %q...", q, err, want)
		}
	}
}
