package redislock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// countingHook counts the commands and connections a go-redis client makes.
type countingHook struct{ cmds, dials atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestInvalidInputSendsNothing checks that bad keys, options, tokens and
// prefixes are refused before any command reaches Redis.
func TestInvalidInputSendsNothing(t *testing.T) {
	s := testserver.Redis(t)
	ctx := testContext(t)
	hook := &countingHook{}
	client := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	client.AddHook(hook)
	t.Cleanup(func() { _ = client.Close() })

	for _, p := range []string{"a{b", "a}b", "{}", "a\nb", "a\xffb", strings.Repeat("p", distlock.MaxKeyLen+1)} {
		if _, err := redislock.New(client, redislock.WithPrefix(p)); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("prefix %q: got %v, want ErrInvalidOption", p, err)
		}
	}
	// Open checks the prefix before it dials: nothing listens on port 1.
	if _, err := redislock.Open(ctx, "redis://127.0.0.1:1/0?prefix=a%7Bb"); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("Open with a bad prefix: got %v, want ErrInvalidOption", err)
	}
	for name, opt := range map[string]redislock.Option{
		"zero request timeout":                       redislock.WithRequestTimeout(0),
		"negative request timeout":                   redislock.WithRequestTimeout(-time.Second),
		"zero dial timeout":                          redislock.WithDialTimeout(0),
		"zero waiter timeout":                        redislock.WithWaiterTimeout(0),
		"short waiter timeout":                       redislock.WithWaiterTimeout(10 * time.Millisecond),
		"negative replica acks":                      redislock.WithReplicaAck(-1, time.Second),
		"zero replica ack timeout":                   redislock.WithReplicaAck(1, 0),
		"negative replica ack timeout":               redislock.WithReplicaAck(1, -time.Second),
		"replica ack timeout at the request timeout": redislock.WithReplicaAck(1, redislock.DefaultRequestTimeout),
	} {
		if _, err := redislock.New(client, opt); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("New with %s: got %v, want ErrInvalidOption", name, err)
		}
	}
	// WAIT must follow the write on its connection, which a Ring does not
	// say.
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": s.Addr()}})
	if _, err := redislock.New(ring, redislock.WithReplicaAck(1, time.Second)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("New on a Ring with WithReplicaAck: got %v, want ErrInvalidOption", err)
	}
	_ = ring.Close()
	for _, u := range []string{
		"redis-sentinel://127.0.0.1:1/",
		"redis-sentinel:///mymaster",
		"redis-cluster://",
		"redis-cluster://?addr=127.0.0.1:1",
		"redis://127.0.0.1:1/0?request_timeout=0s",
		"redis://127.0.0.1:1/0?request_timeout=soon",
		"redis://127.0.0.1:1/0?dial_timeout=-1s",
		"redis://127.0.0.1:1/0?waiter_timeout=1ms",
		"redis://127.0.0.1:1/0?replica_ack=-1",
		"redis://127.0.0.1:1/0?replica_ack=1&replica_ack_timeout=0s",
		"redis://127.0.0.1:1/0?replica_ack_timeout=1s",
		// The Sentinel master is named by redis-sentinel://host/master;
		// a redis:// URL naming one would have it ignored.
		"redis://127.0.0.1:1/0?master_set=mymaster",
		"memcached://127.0.0.1:1",
	} {
		if _, err := redislock.Open(ctx, u); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("Open(%q): got %v, want ErrInvalidOption", u, err)
		}
	}
	if n, d := hook.cmds.Load(), hook.dials.Load(); n != 0 || d != 0 {
		t.Fatalf("invalid options sent %d commands over %d connections, want none", n, d)
	}

	b, err := redislock.New(client) // checks the server version
	if err != nil {
		t.Fatal(err)
	}
	cmds, dials := hook.cmds.Load(), hook.dials.Load()
	c := distlock.New(b)
	t.Cleanup(func() { _ = c.Close() })
	badKeys := []string{"", strings.Repeat("k", distlock.MaxKeyLen+1), "a\x00b", "a\nb", "a\x7fb", "a\xffb"}
	for _, k := range badKeys {
		if _, err := c.Lock(ctx, k); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("Lock %q: got %v, want ErrInvalidKey", k, err)
		}
		if _, err := c.Inspect(ctx, k); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("Inspect %q: got %v, want ErrInvalidKey", k, err)
		}
		if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: k, Token: "t", TTL: time.Second}); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("Backend.Acquire %q: got %v, want ErrInvalidKey", k, err)
		}
		if err := b.Renew(ctx, k, "t", time.Second); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("Backend.Renew %q: got %v, want ErrInvalidKey", k, err)
		}
		if err := b.Release(ctx, k, "t"); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("Backend.Release %q: got %v, want ErrInvalidKey", k, err)
		}
		if _, err := b.AcquireWait(ctx, driver.AcquireRequest{Key: k, Token: "t", TTL: time.Second}); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("Backend.AcquireWait %q: got %v, want ErrInvalidKey", k, err)
		}
	}
	if _, err := c.List(ctx, "a\nb"); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf("List with a control character: got %v, want ErrInvalidKey", err)
	}
	for name, opts := range map[string][]distlock.Option{
		"zero lease":          {distlock.WithLease(0)},
		"lease under minimum": {distlock.WithLease(time.Millisecond)},
		"negative wait":       {distlock.WithWait(-2 * time.Second)},
		"negative lock delay": {distlock.WithLockDelay(-time.Second)},
	} {
		if _, err := c.Lock(ctx, "valid", opts...); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: got %v, want ErrInvalidOption", name, err)
		}
	}
	bad := []struct {
		name string
		call func() error
	}{
		{"acquire without token", func() error {
			_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "valid", TTL: time.Second})
			return err
		}},
		{"acquire with zero TTL", func() error {
			_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "valid", Token: "t"})
			return err
		}},
		{"renew with negative TTL", func() error { return b.Renew(ctx, "valid", "t", -time.Second) }},
		{"release without token", func() error { return b.Release(ctx, "valid", "") }},
		{"acquire with a newline in the token", func() error {
			_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "valid", Token: "t\n", TTL: time.Second})
			return err
		}},
		{"release with a newline in the token", func() error { return b.Release(ctx, "valid", "t\n") }},
		{"wait with a newline in the token", func() error {
			_, err := b.AcquireWait(ctx, driver.AcquireRequest{Key: "valid", Token: "t\n", TTL: time.Second})
			return err
		}},
		{"wait with zero TTL", func() error {
			_, err := b.AcquireWait(ctx, driver.AcquireRequest{Key: "valid", Token: "t"})
			return err
		}},
		{"handoff to a token with a newline", func() error {
			_, err := b.Handoff(ctx, "valid", "t", driver.AcquireRequest{Key: "valid", Token: "u\n", TTL: time.Second})
			return err
		}},
	}
	for _, tc := range bad {
		if err := tc.call(); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: got %v, want ErrInvalidOption", tc.name, err)
		}
	}
	if n, d := hook.cmds.Load()-cmds, hook.dials.Load()-dials; n != 0 || d != 0 {
		t.Fatalf("invalid input sent %d commands over %d connections, want none", n, d)
	}
	// The hook does count: one valid request goes through it.
	if _, err := c.Inspect(ctx, "valid"); err != nil {
		t.Fatal(err)
	}
	if hook.cmds.Load() == cmds {
		t.Fatal("the hook counted no command for a valid request")
	}
}
