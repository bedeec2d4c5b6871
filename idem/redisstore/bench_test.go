package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/idem/idemtest"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkRedis compares, in one run on one server, a replay of a recorded
// result with a plain GET of a key, and a first run (nothing recorded) with a
// lock and release of the same lock store.
func BenchmarkRedis(b *testing.B) {
	ctx := context.Background()
	addr := testserver.Redis(b).Addr()
	k, closeAll, err := newKeeper(ctx, addr)
	if err != nil {
		b.Fatal(err)
	}
	defer closeAll()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	lb, err := redislock.New(rc)
	if err != nil {
		b.Fatal(err)
	}
	c := distlock.New(lb)
	defer c.Close()
	value := []byte("receipt-0123456789")
	fn := func(context.Context, uint64) ([]byte, error) { return value, nil }
	if err := rc.Set(ctx, "plain", value, 0).Err(); err != nil {
		b.Fatal(err)
	}
	if _, err := k.Do(ctx, "recorded", []byte("request"), fn); err != nil {
		b.Fatal(err)
	}
	b.Run("Get", func(b *testing.B) {
		for b.Loop() {
			if err := rc.Get(ctx, "plain").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Replay", func(b *testing.B) {
		for b.Loop() {
			if r, err := k.Do(ctx, "recorded", []byte("request"), fn); err != nil || !r.Replayed {
				b.Fatal(r, err)
			}
		}
	})
	b.Run("LockRelease", func(b *testing.B) {
		for b.Loop() {
			l, err := c.TryLock(ctx, "bench-lock", distlock.WithLease(idemtest.Lease), distlock.WithWatchdog(true))
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("FirstRun", func(b *testing.B) {
		prefix, i := "first/"+strconv.FormatInt(time.Now().UnixNano(), 10)+"/", 0
		for b.Loop() {
			i++
			if r, err := k.Do(ctx, prefix+strconv.Itoa(i), []byte("request"), fn); err != nil || r.Replayed {
				b.Fatal(r, err)
			}
		}
	})
}
