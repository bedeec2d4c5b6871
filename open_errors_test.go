package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/backend/dynamolock"
	_ "github.com/distlock/distlock/backend/etcdlock"
	_ "github.com/distlock/distlock/backend/memlock"
	_ "github.com/distlock/distlock/backend/mysqllock"
	_ "github.com/distlock/distlock/backend/pglock"
	_ "github.com/distlock/distlock/backend/redislock"
	_ "github.com/distlock/distlock/backend/redlock"
	_ "github.com/distlock/distlock/backend/sqllock"
	_ "github.com/distlock/distlock/backend/zklock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// checkNamedOnce checks that err, from distlock.Open(raw), names the
// redacted URL exactly once and never its password.
func checkNamedOnce(t *testing.T, raw string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("Open(%s) succeeded", raw)
	}
	shown := driver.Redact(raw)
	if n := strings.Count(err.Error(), shown); n != 1 {
		t.Errorf("Open error names %s %d times, want once:\n%v", shown, n, err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("Open error shows the password:\n%v", err)
	}
}

// TestOpenBadURLNamesItOnce opens a URL of every registered scheme with a
// parameter each backend refuses (a bad request_timeout, or an unknown
// one): each fails with an error matching
// driver.ErrInvalidOption that names the URL once, before any connection.
func TestOpenBadURLNamesItOnce(t *testing.T) {
	hosts := map[string]string{
		"dynamodb":       "locks",
		"mem":            "shared",
		"redlock":        "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
		"redis-sentinel": "127.0.0.1:1/master",
	}
	for _, scheme := range distlock.Schemes() {
		if scheme == "distlock" || scheme == "distlocks" { // another module's, tested there
			continue
		}
		host, ok := hosts[scheme]
		if !ok {
			host = "127.0.0.1:1/x"
		}
		user := "user:secret@"
		if slices.Contains([]string{"dynamodb", "etcd", "mem", "zk"}, scheme) { // they refuse credentials
			user = ""
		}
		raw := scheme + "://" + user + host + "?request_timeout=soon&region=us-east-1"
		t.Run(scheme, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := distlock.Open(ctx, raw)
			checkNamedOnce(t, raw, err)
			t.Log(err)
			if !errors.Is(err, driver.ErrInvalidOption) {
				t.Errorf("Open(%s) = %v, want an error matching driver.ErrInvalidOption", raw, err)
			}
		})
	}
}

// TestOpenRefusedNamesURLOnce opens every scheme whose Open connects at an
// address where nothing listens: each fails naming the refused dial, and
// the URL once.
func TestOpenRefusedNamesURLOnce(t *testing.T) {
	free := func() string { return fmt.Sprintf("%s:%d", testserver.Host, testserver.FreePort(t)) }
	addr := free()
	t.Setenv("AWS_ACCESS_KEY_ID", "dummy") // dynamodb:// signs its requests
	t.Setenv("AWS_SECRET_ACCESS_KEY", "dummy")
	for _, raw := range []string{
		"redis://user:secret@" + addr + "/0",
		"redlock://user:secret@" + addr + "," + free() + "," + free(), // three distinct nodes
		"etcd://" + addr + "/x?dial_timeout=2s",
		"zk://" + addr + "/x?dial_timeout=1s",
		"mysql://root:secret@" + addr + "/db",
		"mysql+table://root:secret@" + addr + "/db",
		"dynamodb://locks?region=us-east-1&endpoint=http://" + addr,
	} {
		scheme, _, _ := strings.Cut(raw, ":")
		if !slices.Contains(distlock.Schemes(), scheme) {
			t.Fatalf("scheme %s is not registered", scheme)
		}
		t.Run(scheme, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := distlock.Open(ctx, raw)
			checkNamedOnce(t, raw, err)
			t.Log(err)
			if err != nil && !strings.Contains(err.Error(), "refused") {
				t.Errorf("Open(%s) = %v, want the refused dial named", raw, err)
			}
		})
	}
}
