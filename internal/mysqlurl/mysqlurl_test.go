package mysqlurl_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/mysqlurl"
)

func TestConfig(t *testing.T) {
	u, _ := url.Parse("mysql://app:p%40ss:w@db.internal/locks?timeout=2s&keepalive=1s&parseTime=true")
	cfg, err := mysqlurl.Config(u, "keepalive")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "app" || cfg.Passwd != "p@ss:w" || cfg.Net != "tcp" || cfg.Addr != "db.internal:3306" ||
		cfg.DBName != "locks" || cfg.Timeout != 2*time.Second || !cfg.ParseTime {
		t.Errorf("config %+v", cfg)
	}
	for _, bad := range []string{"mysql:///db", "mysql://h:1/db?timeout=never"} {
		u, _ := url.Parse(bad)
		if _, err := mysqlurl.Config(u); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
