package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/backend/redlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/childproc"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

func TestMain(m *testing.M) {
	if code, child := childproc.Main(childEnv, procJob.run); child { // a client process of a benchmark
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

// nodes starts n redis-server processes.
func nodes(t testing.TB, n int) []*testserver.Server {
	t.Helper()
	s := make([]*testserver.Server, n)
	for i := range s {
		s[i] = testserver.Redis(t)
	}
	return s
}

func addrsOf(servers []*testserver.Server) []string {
	a := make([]string, len(servers))
	for i, s := range servers {
		a[i] = s.Addr()
	}
	return a
}

// redlockURL is the redlock:// URL of addrs, with query q if not empty.
func redlockURL(addrs []string, q string) string {
	u := "redlock://" + strings.Join(addrs, ",")
	if q != "" {
		u += "?" + q
	}
	return u
}

// open returns Redlock over addrs from Open; the test closes it.
func open(t testing.TB, addrs []string, q string, opts ...redlock.Option) *redlock.Backend {
	t.Helper()
	b, err := redlock.Open(context.Background(), redlockURL(addrs, q), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// ownedGoRedis is Redlock over go-redis clients that its Close also closes,
// so that the suite's leak check sees no client goroutines left.
type ownedGoRedis struct {
	*redlock.Backend
	clients []redis.UniversalClient
}

func (o ownedGoRedis) Close() error {
	errs := []error{o.Backend.Close()}
	for _, c := range o.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

func newGoRedis(t testing.TB, addrs []string) driver.Backend {
	t.Helper()
	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
	}
	b, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	return ownedGoRedis{b, clients}
}

// deleteKey removes key's lock from every node behind its holder's back.
func deleteKey(t testing.TB, addrs []string, key string) {
	t.Helper()
	for _, a := range addrs {
		if _, err := testserver.RedisCommand(context.Background(), a, "DEL", lockName(key), lockName(key)+":meta"); err != nil {
			t.Fatal(err)
		}
	}
}

// lockName is the Redis name of a test key's lock under the default prefix
// (test keys need no escaping).
func lockName(key string) string { return redislock.DefaultPrefix + "{" + key + "}" }

func TestConformance(t *testing.T) {
	addrs := addrsOf(nodes(t, 5))
	// The whole suite through rueidis, the part a client library can
	// change through go-redis: the Redlock algorithm is the same code.
	// Through rueidis a node's reply counts until the grant's validity ends
	// (node_timeout=1s), not only for a tenth of the lease: a node answering
	// late on a loaded machine would otherwise leave a first grant on three
	// or four nodes, and a repeat by its token would take a fresh fence on
	// the others (TestSlowNode tests the default).
	harnesses := []struct {
		name string
		nb   func(t testing.TB) driver.Backend
		run  func(*testing.T, locktest.Harness)
	}{
		{"rueidis", func(t testing.TB) driver.Backend { return open(t, addrs, "node_timeout=1s") }, locktest.Run},
		{"go-redis", func(t testing.TB) driver.Backend { return newGoRedis(t, addrs) }, locktest.RunTopology},
	}
	for _, h := range harnesses {
		nb := h.nb
		t.Run(h.name, func(t *testing.T) {
			h.run(t, locktest.Harness{
				NewBackend: nb,
				DeleteKey:  func(t testing.TB, key string) { deleteKey(t, addrs, key) },
				StoreAddrs: addrs,
				NewBackendAtAll: func(t testing.TB, addrs []string) driver.Backend {
					return open(t, addrs, "")
				},
				// A waiter in another process hears a release from the nodes
				// (Watch): about 2ms on an idle machine, where a poll of
				// 5-100ms takes 13-23ms. Its wake is spread over up to four
				// round trips (noticeDelay), which a machine busy with other
				// packages' tests stretches: medians of 12, 20 and 33ms were
				// seen there, the last against a bound of 25ms. So the bound
				// is the suite's default, which on Redlock tells a lost
				// notice from a notice, not a poll from one.
				NotifyLatency: 50 * time.Millisecond,
			})
		})
	}
}

// Bad options, node counts and URLs fail with ErrInvalidOption before any
// connection is made.
func TestInvalidInput(t *testing.T) {
	ctx := context.Background()
	addrs := addrsOf(nodes(t, 3))
	cases := map[string]string{
		"two nodes":             redlockURL(addrs[:2], ""),
		"four nodes":            redlockURL(append(addrs, "127.0.0.1:1"), ""),
		"one node":              redlockURL(addrs[:1], ""),
		"node twice":            redlockURL([]string{addrs[0], addrs[1], addrs[0]}, ""),
		"no port":               redlockURL([]string{addrs[0], addrs[1], "127.0.0.1"}, ""),
		"bad database":          redlockURL(addrs, "") + "/x",
		"bad request_timeout":   redlockURL(addrs, "request_timeout=soon"),
		"zero request_timeout":  redlockURL(addrs, "request_timeout=0s"),
		"negative node_timeout": redlockURL(addrs, "node_timeout=-1ms"),
		"bad dial_timeout":      redlockURL(addrs, "dial_timeout=x"),
		"drift rate too big":    redlockURL(addrs, "drift_rate=0.5"),
		"negative drift rate":   redlockURL(addrs, "drift_rate=-0.1"),
		"bad drift rate":        redlockURL(addrs, "drift_rate=x"),
		"negative margin":       redlockURL(addrs, "drift_margin=-1ms"),
		"prefix with brace":     redlockURL(addrs, "prefix=a{"),
		// The nodes are the host list: addr would give each node's client
		// the other addresses too.
		"addr":         redlockURL(addrs, "addr="+addrs[0]),
		"unknown":      redlockURL(addrs, "colour=red"),
		"wrong scheme": strings.Replace(redlockURL(addrs, ""), "redlock:", "redis:", 1),
	}
	for name, u := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := redlock.Open(ctx, u)
			if !errors.Is(err, driver.ErrInvalidOption) {
				if b != nil {
					_ = b.Close()
				}
				t.Fatalf("Open(%s) = %v, want ErrInvalidOption", u, err)
			}
		})
	}
	t.Run("unknown names redlock's parameters", func(t *testing.T) {
		u := redlockURL(addrs, "colour=red")
		_, err := redlock.Open(ctx, u)
		if err == nil {
			t.Fatalf("Open(%s) succeeded", u)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "redlock: URL parameter colour: ") || strings.Contains(msg, "redislock") {
			t.Errorf("Open(%s) = %q, want redlock naming the parameter, not a node's redislock", u, msg)
		}
		for _, own := range []string{"node_timeout", "drift_rate", "client_name"} {
			if !strings.Contains(msg, own) {
				t.Errorf("Open(%s) = %q: the known parameters leave out %s", u, msg, own)
			}
		}
		if strings.Contains(msg, "addr") {
			t.Errorf("Open(%s) = %q: it offers addr, which redlock refuses", u, msg)
		}
	})
	t.Run("New", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: addrs[0]})
		defer c.Close()
		for name, clients := range map[string][]redis.UniversalClient{
			"none": nil, "one": {c}, "nil client": {c, nil, c}, "same node": {c, c, c},
		} {
			if _, err := redlock.New(clients); !errors.Is(err, driver.ErrInvalidOption) {
				t.Errorf("New(%s) = %v, want ErrInvalidOption", name, err)
			}
		}
		if _, err := redlock.NewRueidis(nil); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("NewRueidis(nil) = %v, want ErrInvalidOption", err)
		}
	})
	t.Run("requests", func(t *testing.T) {
		b := open(t, addrs, "")
		req := driver.AcquireRequest{Key: "k", Token: "t", TTL: time.Millisecond} // no validity after the drift
		if _, err := b.Acquire(ctx, req); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("Acquire with a 1ms time to live = %v, want ErrInvalidOption", err)
		}
		req.TTL, req.Token = time.Second, "a\nb"
		if _, err := b.Acquire(ctx, req); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("Acquire with a newline in the token = %v, want ErrInvalidOption", err)
		}
		if err := b.Renew(ctx, "", "t", time.Second); !errors.Is(err, driver.ErrInvalidKey) {
			t.Errorf("Renew of an empty key = %v, want ErrInvalidKey", err)
		}
		for _, a := range addrs {
			if n, err := testserver.RedisCommand(ctx, a, "DBSIZE"); err != nil || n != "0" {
				t.Errorf("node %s holds %s keys (%v) after bad requests, want 0", a, n, err)
			}
		}
	})
}

// Open and distlock.Open read the URL's options: a per-node request timeout
// and a prefix, on every node.
func TestOpen(t *testing.T) {
	ctx := context.Background()
	addrs := addrsOf(nodes(t, 3))
	c, err := distlock.Open(ctx, redlockURL(addrs, "prefix=app:&request_timeout=2s&node_timeout=30ms&drift_rate=0.02&drift_margin=1ms&client_name=x"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A wait, though the key is free: a first attempt on new links may miss
	// the 30 ms node timeout on a loaded machine.
	l, err := c.Lock(ctx, "open", distlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// A majority holds it under the URL's prefix: a node that answered
	// after the node timeout was released again.
	var holding []string
	for _, a := range addrs {
		if v, err := testserver.RedisCommand(ctx, a, "GET", "app:{open}"); err == nil && v == l.Token() {
			holding = append(holding, a)
		}
	}
	if len(holding) < 2 {
		t.Errorf("app:{open} holds the token on %q of %q, want a majority", holding, addrs)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, ok := c.Backend().(driver.Namer); !ok || n.Name() != "redlock" {
		t.Errorf("backend name: %v", c.Backend())
	}
}

// Calls after Close fail with ErrClosed, and Close twice is harmless.
func TestClosed(t *testing.T) {
	ctx := context.Background()
	addrs := addrsOf(nodes(t, 3))
	clients := make([]rueidis.Client, len(addrs))
	for i, a := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	b, err := redlock.NewRueidis(clients)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Nodes(); fmt.Sprint(got) != fmt.Sprint(addrs) {
		t.Errorf("Nodes() = %v, want %v", got, addrs)
	}
	if err := errors.Join(b.Close(), b.Close()); err != nil {
		t.Fatal(err)
	}
	req := driver.AcquireRequest{Key: "k", Token: "t", TTL: time.Second}
	_, aerr := b.Acquire(ctx, req)
	_, ierr := b.Inspect(ctx, "k")
	_, ferr := b.ForceRelease(ctx, "k", driver.ForceOptions{})
	_, lerr := b.List(ctx, "")
	_, perr := b.ListPage(ctx, "", "", 1)
	for name, err := range map[string]error{"Acquire": aerr, "Renew": b.Renew(ctx, "k", "t", time.Second),
		"Release": b.Release(ctx, "k", "t"), "Inspect": ierr, "ForceRelease": ferr, "List": lerr, "ListPage": perr} {
		if !errors.Is(err, driver.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	// The clients stay open.
	if err := clients[0].Do(ctx, clients[0].B().Ping().Build()).Error(); err != nil {
		t.Errorf("client closed by Close: %v", err)
	}
}
