package zklock_test

import (
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/distlock/distlock/backend/zklock"
)

// TestParseURL: a server without a port gets ZooKeeper's, and the
// timeouts the parameters set are readable from the Config.
func TestParseURL(t *testing.T) {
	parse := func(raw string) zklock.Config {
		t.Helper()
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := zklock.ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if s := parse("zk://[::1]").Servers; !slices.Equal(s, []string{"[::1]:2181"}) {
		t.Errorf("Servers = %q, want [::1]:2181", s)
	}
	cfg := parse("zk://zk-1,zk-2:2182/app?session_timeout=4s&dial_timeout=3s")
	if want := []string{"zk-1:2181", "zk-2:2182"}; !slices.Equal(cfg.Servers, want) {
		t.Errorf("Servers = %q, want %q", cfg.Servers, want)
	}
	if cfg.SessionTimeout() != 4*time.Second || cfg.DialTimeout() != 3*time.Second {
		t.Errorf("session timeout %v, dial timeout %v, want 4s and 3s", cfg.SessionTimeout(), cfg.DialTimeout())
	}
	var none zklock.Config
	if none.SessionTimeout() != zklock.DefaultSessionTimeout || none.DialTimeout() != zklock.DefaultDialTimeout {
		t.Errorf("defaults: session timeout %v, dial timeout %v", none.SessionTimeout(), none.DialTimeout())
	}
}
